"""What the Python API returns, shown in a notebook through IPython's display protocol (IPython is never
imported): a :class:`Run` as tutorial §5's figure and the report page, a :class:`SweepTable` as the table
the command prints at a sweep's end. Nothing is written unless asked (:meth:`Run.save`, :meth:`Run.report`)."""
from __future__ import annotations

import base64
import dataclasses
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.core.errors import AttnlabError
from attnlab.core.focus import FocusSink, shown
from attnlab.core.i18n import _
from attnlab.core.records import RunInfo, RunResult
from attnlab.outputs import artifacts, destination, rundir
from attnlab.outputs.plots import FigureSink, evolution_figure, png
from attnlab.saved.answers import answer, table_columns
from attnlab.saved.report import render, write_run_report
from attnlab.saved.report_data import PageSink, run_record
from attnlab.saved.table import STATUSES, cell_text, columns_of, csv_text, distribution, format_table, header


@dataclass(eq=False)  # a run is itself (its arrays have no one truth value)
class Run(RunResult):
    """A training run with what it knew at its start (``info``: the resolved config, the tokens, the focus
    token) and its observations (``recorded``: ``focus`` as summary.json has it, ``n_tokens``, ``token_table``)."""

    info: RunInfo | None = None
    recorded: dict[str, Any] = field(default_factory=dict)
    _page: str | None = field(default=None, repr=False)
    _png: bytes | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        """A few lines: status and loss, where the focus token attends at the last snapshot, what to call."""
        final = "n/a" if self.final_loss is None else f"{self.final_loss:.6g}"
        status = _(self.status) if self.status in STATUSES else self.status
        out = [_("attnlab run: {status}, {n} steps, final loss {final}, {time:.2f} s").format(
            status=status, n=self.steps_run, final=final, time=self.wall_time_s)]
        if self.error:
            out.append(f"  {self.error}")
        if focus := self.recorded.get("focus"):
            mean = focus["mean"]
            target = _("uniform (1/{T})").format(T=len(self.tokens)) if mean["uniform"] else shown(mean["token"])
            out.append(_("  {token} attends most to {target} ({weight:.2f}) at step {step}").format(
                token=shown(focus["token"]), target=target, weight=mean["weight"], step=focus["step"]))
        out.append(_("  .losses ({n},)  .snapshots ({k} of (H, T, T))  .save(DIR)  .report(FILE)").format(
            n=len(self.losses), k=len(self.snapshots)))
        return "\n".join(out)

    def png(self) -> bytes | None:
        """Tutorial §5's figure (one heatmap per snapshot) as PNG bytes, drawn in memory; None without snapshots."""
        if self._png is None and self.snapshots:
            self._png = png(evolution_figure, self.snapshots, self.tokens, len(self.snapshots))
        return self._png

    def page(self) -> str:
        """The report page (``attnlab-report`` of this run) as HTML text, made from what the run holds."""
        if self._page is None:
            summary, page, focus = self._summary(), PageSink(), FocusSink()
            for sink in (page, focus):
                sink.on_start(dataclasses.replace(self.info, snapshot_steps=[s.step for s in self.snapshots]))
                for snapshot in self.snapshots:
                    sink.on_snapshot(snapshot)
            name = self.info.config.get("name") or _("this run")
            record = run_record(Path("run"), summary, self.losses, page, focus, name=str(name))
            record["run_dir"] = _("in memory: run.save(DIR) writes it into a folder")
            self._page = render([record])
        return self._page

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """The §5 figure, then the report page (860 px: its detail view unscrolled) in an ``<iframe srcdoc>`` whose
        ``sandbox`` allows its scripts only: another origin, so its styles and script cannot reach the notebook."""
        if self.info is None or not self.snapshots:  # nothing to draw (a run that failed before its first step)
            return {"text/plain": repr(self)}
        png = base64.b64encode(self.png()).decode("ascii")
        image = (f'<img alt="{html.escape(_("Attention weights during training"))}" '
                 f'src="data:image/png;base64,{png}" style="max-width: 100%;">')
        frame = (f'<iframe srcdoc="{html.escape(self.page(), quote=True)}" sandbox="allow-scripts" '
                 f'title="{html.escape(_("attnlab report"))}" style="width: 100%; height: 860px; '
                 'border: 1px solid #ccc; border-radius: 4px;"></iframe>')
        return {"text/plain": repr(self), "text/html": f'<div class="attnlab-run">{image}{frame}</div>',
                "image/png": png}

    def _summary(self) -> dict[str, Any]:
        """summary.json as the command writes it for this run; AttnlabError when the run kept too little."""
        if self.info is None:
            raise AttnlabError(_("this run stopped before its first step: nothing to save"))
        if len(self.losses) != self.steps_run or not self.snapshots and self.info.snapshot_steps:
            raise AttnlabError(_("this run kept no losses or snapshots (keep_losses/keep_snapshots=False): "
                                 "nothing to save"))
        n, threshold, config = self.steps_run, self.steps_to_threshold, self.info.config
        val = [s.val_loss for s in self.snapshots if s.val_loss is not None]
        return {"status": self.status, "final_loss": float(self.losses[-1]) if n else None, "steps_run": n,
                **({"val_loss": val[-1]} if val else {}),
                **({"generation": self.generation} if self.generation else {}),
                "steps_to_threshold": threshold if threshold is not None and threshold < n else None,
                "wall_time_s": round(self.wall_time_s, 6), "error": self.error, "task": "train", "config": config,
                "overrides": [], "versions": artifacts.environment(str(config.get("device", "cpu"))), **self.recorded}

    def save(self, dir: str | Path) -> Path:
        """Write the run dir ``attnlab`` would have written into ``dir`` (new or empty): metrics.csv,
        attention.npz, summary.json, the figures and report.html (no TensorBoard events), the run's records
        replayed into the command's sinks. Returns ``dir``; RunDirError when ``dir`` holds something else."""
        run_dir = Path(dir)
        rundir.claim(run_dir, key="dir", value=str(dir))
        try:
            summary = self._summary()
            for sink in [artifacts.RunDirSink(run_dir), FigureSink(run_dir)]:
                sink.on_start(self.info)
                sink.on_losses(np.arange(len(self.losses), dtype=np.int64), np.asarray(self.losses, np.float64))
                for snapshot in self.snapshots:
                    sink.on_snapshot(snapshot)
                sink.flush()
                sink.on_end(self)
                sink.close()
            artifacts.write_summary(run_dir, summary)
            write_run_report(run_dir)
        finally:
            rundir.release(run_dir)
        return run_dir

    def report(self, path: str | Path = "report.html", force: bool = False) -> Path:
        """Write the report page to ``path`` (an offline HTML file), as every file attnlab writes where you point
        it (:mod:`attnlab.outputs.destination`): one that exists is replaced only when attnlab wrote it or with
        ``force=True``, else AttnlabError (one line). Returns ``path``."""
        return destination.write(path, self.page().encode("utf-8"), key="report()", kind="page", force=force)


class SweepTable(list):
    """The jobs of a sweep as the command's end table shows them: its items and :attr:`rows` (one dict per job,
    the columns of ``summary.csv``), :attr:`columns` (the printed ones), :attr:`answer` (an exercise's, in
    sentences), :attr:`dir` (the sweep folder, None when not kept). Text, or an HTML table in a notebook."""

    def __init__(self, rows: list[dict[str, Any]], dir: Path | None = None) -> None:
        super().__init__({k: v for k, v in row.items() if dir is not None or k != "path"} for row in rows)
        self.rows, self.dir = self, dir
        self.columns = table_columns(self.rows) or columns_of(self.rows, table=True)
        self.answer = answer(self.rows)

    def footer(self) -> list[str]:
        """The lines under the table: the focus token's distribution, an exercise's answer, the sweep folder."""
        folder = _("sweep folder: {path}").format(path=self.dir) if self.dir is not None else None
        return [line for line in (distribution(self.rows), self.answer, folder) if line]

    def __repr__(self) -> str:
        return "\n".join([format_table(self.rows, self.columns), *self.footer()])

    def _repr_html_(self) -> str:
        right = {c for c in self.columns if all(v is None or isinstance(v, (int, float)) and not isinstance(v, bool)
                                               for v in (r.get(c) for r in self.rows))}
        align = {c: f' style="text-align: {"right" if c in right else "left"};"' for c in self.columns}
        head = "".join(f"<th{align[c]}>{html.escape(header(c))}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td{align[c]}>{html.escape(cell_text(c, r.get(c)))}</td>"
                                        for c in self.columns) + "</tr>" for r in self.rows)
        foot = "".join(f"<p>{html.escape(line)}</p>" for line in self.footer())
        return (f'<div class="attnlab-sweep"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
                f'{foot}</div>')

    def to_csv(self) -> str:
        """The rows as CSV text (``summary.csv``'s columns)."""
        return csv_text(self.rows)
