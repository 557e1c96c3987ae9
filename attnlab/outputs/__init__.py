"""One run dir as attnlab writes it: the claim (rundir), its files (artifacts), the console,
figures (plots, fonts), TensorBoard, and console output that never stops a run (streams)."""
