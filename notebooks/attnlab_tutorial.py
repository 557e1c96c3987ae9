# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 从零理解自注意力：用 attnlab 边跑边看
#
# 这是教程《从零理解自注意力》的配套 notebook：§0–§8 按教程的顺序，每一节一个单元格，结果（教程里的数字、
# 热力图、可以拖动的报告页、练习的答案表）都直接显示在单元格下面。
#
# **安装（只需一次）。** 在一个单元格里运行下面这行，然后重启内核（Kernel → Restart）：
#
# ```
# %pip install -e ..
# ```
#
# （`..` 是 attnlab 仓库的文件夹：本文件在仓库的 `notebooks/` 里；在别处打开时换成 attnlab 文件夹的路径。
# Colab 等云端 notebook 先把仓库上传或克隆到那台机器上。）
#
# **第一次 `import attnlab` 之后的第一次运行要等几秒钟**（加载 torch 和 Hydra），之后每次都很快。
# 全程离线：attnlab 自带 GPT-2 的词表和中文字体，什么都不下载；除非你让它保存，它也不写任何文件。

# %% [markdown]
# ## 0. 准备工作
#
# 教程的每一节在 attnlab 里是一次函数调用。改参数就像在命令行上一样写 `键=值`，
# 或者写成关键字参数：`model__d_model=16`（两个下划线代表点，即 `model.d_model=16`）。
# `lang="zh"` 让 attnlab 说中文，之后的调用都沿用。

# %%
import attnlab

# %% [markdown]
# ## 1–4. 分词、词嵌入、位置嵌入、自注意力
#
# `attnlab.walkthrough()` 按教程 §1–4 的顺序跑一遍（seed 123，std 0.02），打印教程里的那些输出，
# 并返回每一步的数组。

# %%
arrays = attnlab.walkthrough(lang="zh")

# %% [markdown]
# 返回的数组就是教程里的变量：§1 的 `token_ids`，§2 的 `token_embeddings`，§3 的 `X`，
# §4 的 `Q`、`K`、`V`、`scores`、`weights` 和 `Z`。比如未经训练的注意力权重：每个都是 1/6 ≈ 0.167。

# %%
print("token_ids:", arrays["token_ids"].tolist())
print("X:", arrays["X"].shape, " Q:", arrays["Q"].shape, " Z:", arrays["Z"].shape)
print(arrays["weights"].round(3))

# %% [markdown]
# ### 自己写 §2–4，让 attnlab 检查
#
# 把教程 §2–4 的代码写成六个函数（名字和参数照下面的写），`attnlab.check(globals())` 用教程的输入
# 逐个阶段运行它们，与教程的数字比较；哪一步不对，它会给出期望值、你的值和最可能的错误。

# %%
import torch


def embed_tokens(token_ids, token_emb_layer):
    return token_emb_layer(torch.tensor(token_ids))  # §2：查表


def add_positions(token_embeddings, pos_emb_layer):
    seq_len = token_embeddings.shape[0]
    return token_embeddings + pos_emb_layer(torch.arange(seq_len))  # §3：词含义 + 位置


def project_qkv(X, W_query, W_key, W_value):
    return W_query(X), W_key(X), W_value(X)  # §4.1


def attention_scores(Q, K):
    d_k = K.shape[-1]
    return Q @ K.T / d_k ** 0.5  # §4.2：除以 √d_k


def attention_weights(attn_scores_scaled):
    return torch.softmax(attn_scores_scaled, dim=-1)  # §4.3：每一行加起来为 1


def context_vectors(attn_weights, V):
    return attn_weights @ V  # §4.4


attnlab.check(globals())

# %% [markdown]
# 忘了除以 √d_k 会怎样？把一个写错的版本交给它检查：

# %%
def attention_scores(Q, K):
    return Q @ K.T  # 少了 / d_k ** 0.5


attnlab.check(globals())

# %% [markdown]
# ## 5. 对比实验：让模型真的训练一次
#
# `attnlab.train()` 就是教程 §5 的训练（seed 42，std 1.0，Adam lr 0.05，201 步）。它打印教程的五行，
# 返回的结果在 notebook 里显示为 §5 的热力图，以及一个可以拖动步数的报告页
# （在沙盒化的框里，不影响 notebook 本身）。

# %%
run = attnlab.train()
run

# %% [markdown]
# `run.losses` 是每一步的 loss，`run.snapshots` 是各快照步的注意力权重。想要文件时：
# `run.save("我的运行")` 写出命令行会写的整个运行文件夹，`run.report("report.html")` 只写报告页。
#
# 自己画图时，`attnlab.use_chinese_font()` 让 matplotlib 用 attnlab 自带的中文字体：
# 中文标题不再显示成方框（教程 §5 里 SimHei 那条小提示，一次解决）。

# %%
import matplotlib.pyplot as plt

attnlab.use_chinese_font()
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(run.losses)
ax.set_yscale("log")
ax.set_xlabel("训练步数")
ax.set_ylabel("loss（均方误差）")
ax.set_title("loss 一路下降：2.36 → 0.0000")
plt.show()

# %% [markdown]
# ## 6. 全流程回顾
#
# 文字 → ① 分词 → token_ids → ② 词嵌入 → token_embeddings → ③ + 位置嵌入 → X → ④ Q, K, V →
# ⑤ scores = Q @ K.T / √d_k → ⑥ weights = softmax(scores) → ⑦ Z = weights @ V。
# 上面的 `arrays` 里每一步都有。
#
# ## 7. 核心概念速记表
#
# 见教程 §7。想看别的参数下会怎样，直接改：比如 `attnlab.train(model__d_model=16, optimizer__lr=0.01)`。

# %% [markdown]
# ## 8. 动手练习
#
# 每个练习是一次小扫描（sweep）：`attnlab.exercise(n)` 把这个练习的几个任务都跑一遍，返回一张表，
# 表下面是从这些运行里算出来的答案。
#
# **练习 1**：把 d_model 从 6 改成 16，各步骤的 shape 怎么变？

# %%
attnlab.exercise(1)

# %% [markdown]
# **练习 2**：换一句话，看它被切成几个 token（英文、中文、emoji 各一句）。

# %%
attnlab.exercise(2)

# %% [markdown]
# **练习 3**：把初始化的 std 从 0.02 改成 1.0，注意力还会是均匀的 0.167 吗？

# %%
attnlab.exercise(3)

# %% [markdown]
# **练习 4**：把训练步数、学习率 lr 调大或调小，loss 下降和注意力聚焦的快慢怎么变？（6 个训练任务）

# %%
attnlab.exercise(4)

# %% [markdown]
# **练习 5**：去掉位置嵌入，模型还能区分 “one step” 和 “step one” 吗？

# %%
attnlab.exercise(5)
