"""The cosines consolidation's thresholds stand on, measured on the store's own embedder.

Passage-to-passage cosines of multilingual-e5-small (Q4_0 GGUF through llama.cpp, the model
``memstrata model build`` writes and the embedded store embeds with), rounded to three places.
tests/layers/conversation/test_calibration.py embeds every pair again with the real model, checks
each figure and that the guard (layers/conversation/consolidation/sameness.py) with NEAR_THRESHOLD folds every
duplicate and no distinct pair.  What the figures show:

- restatements (punctuation, case, a note or a confirmation set apart): 0.914-0.997, the lowest
  an English statement behind a Chinese note ("备注：Heidi prefers coffee…" 0.914);
- distinct facts in nearly the same words: 0.888-0.998, most of them above the restatements:
  cosine alone cannot keep 周三/周四, 6333/6334, /var/log//var/lib, "服务器以前在北京机房" or
  "…；另外用户住在上海" apart, the guard does;
- task logs of one task 0.957-0.992 and of different tasks 0.834-0.905 (one task's rollback and
  its deploy 0.899): TASK_TOPIC_THRESHOLD groups no two tasks, and misses that one.
"""

from __future__ import annotations

from typing import NamedTuple

# A pair above this cosine is a candidate duplicate (then the guard decides): under the lowest
# restatement measured (0.914); the guard, not this figure, keeps distinct facts apart.
NEAR_THRESHOLD = 0.90
# Distinct facts this close are statements of one subject with different values: a conflict to
# flag (an LLM, when configured, says whether one replaces the other).
CONFLICT_THRESHOLD = 0.95
# task_log memories this close are logs of one task: a group of MIN_TASK_GROUP of them is
# summarised into one knowledge memory when an LLM is configured.
TASK_TOPIC_THRESHOLD = 0.93
MIN_TASK_GROUP = 3


class Pair(NamedTuple):
    a: str
    b: str
    cosine: float


class TopicPair(NamedTuple):
    a: str
    b: str
    cosine: float
    same_task: bool


# The same fact written twice: what consolidation folds.
DUPLICATES: tuple[Pair, ...] = (
    Pair("部署了 Qdrant，端口 6333", "部署了 Qdrant，端口 6333。", 0.997),
    Pair("The staging database moved to port 6543", "the staging database moved to port 6543 ", 0.995),
    Pair("用户喜欢简洁的回答", "用户喜欢简洁的回答。", 0.996),
    Pair("Qdrant 部署在 6333 端口", "记一下：Qdrant 部署在 6333 端口", 0.982),
    Pair("Qdrant 部署在 6333 端口", "Qdrant 部署在 6333 端口（已确认）", 0.986),
    Pair("The backup job runs at 04:00", "Note: the backup job runs at 04:00", 0.967),
    Pair("The build runs on kestrel", "the build runs on kestrel, as before", 0.948),
    Pair("用户偏好 Tailscale 组网", "用户偏好 Tailscale 组网，已经确认过了", 0.977),
    Pair("会议改到周三下午三点", "会议改到周三下午三点！", 0.992),
    Pair("会议改到周三下午三点", "会议改到星期三下午三点", 0.995),
    Pair("Alice prefers tea over coffee", "alice prefers tea over coffee.", 0.987),
    Pair("The CI pipeline fails when the cache is cold", "CI pipeline fails when the cache is cold", 0.996),
    Pair("deploys go through the staging cluster first", "Deploys go through the staging cluster first, always", 0.953),
    Pair("服务器在北京机房", "服务器在北京机房，记住", 0.980),
    Pair(
        "the metrics cache on harrier-12 is enabled in dev",
        "记一下：the metrics cache on harrier-12 is enabled in dev",
        0.918,
    ),
    Pair(
        "Heidi prefers coffee over juice during search reviews",
        "备注：Heidi prefers coffee over juice during search reviews",
        0.914,
    ),
    Pair(
        "host kestrel-10 serves the search API on port 7690",
        "备注：host kestrel-10 serves the search API on port 7690",
        0.946,
    ),
    Pair(
        "the metrics cache on harrier-12 is enabled in dev",
        "Reminder: the metrics cache on harrier-12 is enabled in dev",
        0.968,
    ),
)
# Different facts in nearly the same words: what it must never fold.
DISTINCT: tuple[Pair, ...] = (
    Pair("会议改到周三下午三点", "会议改到周四下午三点", 0.995),
    Pair("Qdrant 部署在 6333 端口", "Qdrant 部署在 6334 端口", 0.993),
    Pair("paging note 0: the build runs on kestrel", "paging note 1: the build runs on kestrel", 0.973),
    Pair("The build runs on kestrel", "The build runs on falcon", 0.888),
    Pair("The release is on 2026-09-02", "The release is on 2026-09-03", 0.983),
    Pair("断网时写入的第 0 条记忆", "断网时写入的第 1 条记忆", 0.983),
    Pair("Alice prefers tea over coffee", "Bob prefers tea over coffee", 0.951),
    Pair("The staging database moved to port 6543", "The staging database moved to port 6544", 0.986),
    Pair("服务器在北京机房", "服务器在上海机房", 0.985),
    Pair("The backup job runs at 04:00", "The backup job runs at 05:00", 0.957),
    Pair("会议在周三", "会议不在周三", 0.969),
    Pair("The cache is enabled on prod", "The cache is not enabled on prod", 0.932),
    Pair("Use Python 3.11 for the daemon", "Use Python 3.12 for the daemon", 0.990),
    Pair("The gateway is at 10.0.0.1", "The gateway is at 10.0.0.2", 0.988),
    Pair("Logs are kept in /var/log/memstrata", "Logs are kept in /var/lib/memstrata", 0.996),
    Pair("The meeting moved to Wednesday", "The meeting moved to Thursday", 0.959),
    Pair("每天跑 3 次备份", "每天跑 4 次备份", 0.978),
    Pair("用户住在 12 楼", "用户住在 21 楼", 0.975),
    Pair("host kestrel-3 serves the API", "host kestrel-4 serves the API", 0.959),
    Pair("The deploy moved to staging", "The deploy moved from staging", 0.972),
    Pair("Alice reports to Bob", "Bob reports to Alice", 0.995),
    Pair("张三欠李四一百块", "李四欠张三一百块", 0.994),
    Pair("kestrel replicates to falcon", "falcon replicates to kestrel", 0.998),
    Pair("The release is on Sept 2", "The release is on Sept 3", 0.947),
    Pair("发布日期是 9月2日", "发布日期是 9月3日", 0.986),
    Pair("The backup job runs at 04:00", "The backup job runs at 04:00 every day", 0.964),
    Pair("the build runs on kestrel", "the build runs on kestrel only on weekends", 0.909),
    Pair(
        "the metrics cache on harrier-12 is enabled in dev",
        "the metrics cache on harrier-12 is enabled in dev except for billing",
        0.971,
    ),
    Pair("服务器在北京机房", "服务器以前在北京机房", 0.988),
    Pair("用户喜欢简洁的回答", "用户喜欢简洁的回答，但技术问题要详细", 0.971),
    Pair("the build runs on kestrel", "the build runs on kestrel; falcon is down", 0.912),
    Pair("用户喜欢简洁的回答", "用户喜欢简洁的回答；另外用户住在上海", 0.970),
    Pair("ingest logs are kept on osprey", "ingest logs are kept on osprey (rotated weekly)", 0.947),
    Pair("the API was on kestrel", "the API is on kestrel", 0.988),
)
# Task logs, of one task or of two.
TASK_TOPICS: tuple[TopicPair, ...] = (
    TopicPair(
        "deployed v2.3 to staging and ran the smoke tests", "deployed v2.4 to staging, smoke tests passed", 0.957, True
    ),
    TopicPair(
        "deployed v2.3 to staging and ran the smoke tests",
        "rolled the staging deploy back after the smoke tests failed",
        0.899,
        True,
    ),
    TopicPair("部署 v2.3 到预发环境，冒烟测试通过", "部署 v2.4 到预发环境，冒烟测试通过", 0.992, True),
    TopicPair("rotated the TLS certificate on the gateway", "renewed the gateway's TLS certificate", 0.963, True),
    TopicPair(
        "deployed v2.3 to staging and ran the smoke tests", "rotated the TLS certificate on the gateway", 0.845, False
    ),
    TopicPair("清理了 /var/log 下的旧日志", "部署 v2.3 到预发环境，冒烟测试通过", 0.905, False),
    TopicPair("ran the weekly backup restore drill", "rotated the TLS certificate on the gateway", 0.834, False),
)
