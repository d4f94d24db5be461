"""The series budget, without a daemon: kernel labels and ids, the ranking's hysteresis, and the
exactness of the per-identity series (named kernels + other = the identity's totals, in integers,
at every scrape; no counter falls) while kernels change places, processes restart, are renamed by
their plugin and are forgotten; and the identity sources (cgroup, environ, the driver's GPU list)
read from files laid out as /proc lays them out."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest
from gpuobs.segment import KERNEL_COUNTERS_DTYPE


def test_kernel_labels_are_short_names_and_ids_are_stable() -> None:
    from gpuobs.daemon.kernel_labels import MAX_LABEL, kernel_id, kernel_label

    cases = {
        "void vllm::rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, float, int)": (
            "vllm::rms_norm_kernel"
        ),
        "void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>"
        "(c10::BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)": "vllm::act_and_mul_kernel",
        # a table's name cut in its parameter list
        "void vllm::reshape_and_cache_flash_kernel<c10::BFloat16>(c10::BFloat16 const*, long, long": (
            "vllm::reshape_and_cache_flash_kernel"
        ),
        "void (anonymous namespace)::softmax_warp_forward<float, 10>(float*, int)": "softmax_warp_forward",
        "triton_poi_fused_add_mul_0": "triton_poi_fused_add_mul_0",
        "void foo::operator()<int>(int)": "foo::operator()",
        "": "?",
    }
    for demangled, label in cases.items():
        assert kernel_label(demangled) == label, demangled
    long = "void " + "::".join(f"namespace_number_{i}" for i in range(8)) + "::kernel<int>(int)"
    assert kernel_label(long).endswith("::kernel") and len(kernel_label(long)) <= MAX_LABEL
    assert len(kernel_label("x" * 500)) == MAX_LABEL
    # the id is of the mangled name: the same in every process, different per instantiation
    assert kernel_id("_ZN4vllm5k_intEv", "vllm::k<int>()") == kernel_id("_ZN4vllm5k_intEv", "other text")
    assert kernel_id("_Z1aILi1EEvv") != kernel_id("_Z1aILi2EEvv")
    assert len(kernel_id("a")) == 12 and int(kernel_id("a"), 16) >= 0
    assert kernel_id("", "triton_x") == kernel_id("triton_x")


def test_a_place_changes_hands_only_at_a_rerank_and_only_to_twice_the_score() -> None:
    from gpuobs.daemon.kernel_budget import KernelBudget

    budget = KernelBudget(limit=2, rerank_s=60)
    promoted, demoted = budget.update(0.0, {"a": 10, "b": 5, "c": 1})
    assert set(promoted) == {"a", "b"} and demoted == [] and budget.named == {"a", "b"}
    # c is now far hotter, but the re-rank period is not over: nothing changes
    assert budget.update(30.0, {"a": 11, "b": 6, "c": 1000}) == ([], [])
    # at the re-rank: over the window c scored 999+, b 1: b goes
    promoted, demoted = budget.update(60.0, {"a": 500, "b": 7, "c": 1000})
    assert (promoted, demoted) == (["c"], ["b"]) and budget.named == {"a", "c"}
    # a challenger under twice the weakest holder's window score does not take its place
    assert budget.update(120.0, {"a": 600, "b": 150, "c": 1100}) == ([], [])  # b: 143 < 2 x 100
    # free places are filled at any call, by kernels that ran
    wide = KernelBudget(limit=3, rerank_s=60)
    wide.update(0.0, {"a": 1, "z": 0})
    assert wide.named == {"a"}
    assert wide.update(1.0, {"a": 1, "b": 4})[0] == ["b"]
    with pytest.raises(ValueError, match="kernel budget"):
        KernelBudget(limit=-1, rerank_s=1)


def test_ranking_does_not_flap_when_the_hottest_kernel_changes_every_scrape() -> None:
    """Ten kernels of nearly equal load whose hottest changes every scrape: the named set changes
    at most at re-ranks, and far fewer places change hands than there are scrapes."""
    from gpuobs.daemon.kernel_budget import KernelBudget

    budget = KernelBudget(limit=3, rerank_s=60)
    scores = dict.fromkeys("abcdefghij", 0)
    changes_between = 0
    for scrape in range(600):  # one a second for 10 minutes
        for index, kid in enumerate(sorted(scores)):
            scores[kid] += 100 + (50 if index == scrape % 10 else 0)
        before = set(budget.named)
        budget.update(float(scrape), scores)
        if scrape % 60 and scrape > 0:
            changes_between += before != budget.named
    assert changes_between == 0 and budget.changes <= 3


@dataclasses.dataclass
class Fake:
    """A process as the series book gets it."""

    segment: str
    identity: object
    names: list[str]
    counters: np.ndarray
    alive: bool = True


def view(pid: int, alive: bool = True):
    from gpuobs.daemon import results

    stats = results.InjectorStats(
        **{f.name: 0.0 if f.name.endswith("_seconds") else 0 for f in dataclasses.fields(results.InjectorStats)}
    )
    return results.Process(
        pid, "synth", "", "", alive, "counter", 0, "block", "", 0, "ok", "", 0, 0, [], 0.0, 0, stats, 0,
        False, "unknown", 0, 0, 0, "", [], 0, "", 0,
    )  # fmt: skip


def inputs(fakes: list[Fake]):
    from gpuobs.daemon.metric_series import ProcessInput

    return [
        ProcessInput(
            segment=fake.segment,
            view=view(index, fake.alive),
            identity=fake.identity,
            counters=fake.counters,
            durations={},
            names=lambda first, count, fake=fake: [(name, name) for name in fake.names[first : first + count]],
            counts={"events": float(fake.counters["launches"].sum())},
        )
        for index, fake in enumerate(fakes)
    ]


def check_exact(book, previous: dict) -> dict:
    """Every identity: named + other == total per column (integers), no series fell since the
    last scrape, at most limit + 1 series per family. Returns this scrape's values."""
    values = {}
    for series in book.series():
        total = series.total()
        for budget, columns in (("counters", book.counter_columns), ("histograms", book.histogram_columns)):
            kernels = series.kernel_series(budget, columns)
            assert len(kernels) <= series.budgets[budget].limit + 1
            summed = [sum(kernel.values[i] for kernel in kernels) for i in range(len(total[columns]))]
            assert summed == total[columns]
            for kernel in kernels:
                key = (series.identity, budget, kernel.label, kernel.kid)
                values[key] = kernel.values
                if key in previous:
                    assert all(now >= then for now, then in zip(kernel.values, previous[key])), key
        assert all(value >= 0 for value in total)
    return values


def test_named_series_and_other_sum_exactly_while_kernels_processes_and_names_change() -> None:
    from gpuobs.daemon.metric_identity import SeriesIdentity
    from gpuobs.daemon.metric_series import SeriesBook

    rank0 = SeriesIdentity("host", "GPU-0", "0", "m", "0")
    unnamed = SeriesIdentity("host", "GPU-1")
    rank1 = SeriesIdentity("host", "GPU-1", "1", "m", "1")
    book = SeriesBook(("launches", "blocks_observed", "memory_accesses"), 4, 2, rerank_s=10.0, grace_s=100.0)
    rng = random.Random(7)
    names = [f"_Z6kernelILi{i}EEvv" for i in range(30)]

    def counters(count: int) -> np.ndarray:
        return np.zeros(count, dtype=KERNEL_COUNTERS_DTYPE)

    a = Fake("a.seg", rank0, names, counters(30))
    b = Fake("b.seg", unnamed, names[:12], counters(12))
    shown = [a, b]
    previous: dict = {}
    for scrape in range(200):
        now = float(scrape)
        for fake in shown:
            hot = (scrape // 25) % len(fake.names)  # the hot kernel moves now and then
            launches = np.array([rng.randrange(3) for _ in fake.names], dtype=np.uint64)
            launches[hot] += np.uint64(rng.randrange(50, 100))
            fake.counters["launches"] += launches
            fake.counters["blocks_observed"] += launches * np.uint64(4)
        if scrape == 40:  # b's plugin names it: alone under its GPU, it takes its counts along
            b.identity = rank1
        if scrape == 80:  # a restarts: the old one is forgotten, a new one of the same rank comes
            shown = [b]
        if scrape == 81:
            a = Fake("a2.seg", rank0, names, counters(30))
            shown = [a, b]
        if scrape == 120:  # huge counts: exact in integers beyond a float's 2^53
            a.counters["launches"][0] += np.uint64(1 << 60)
        book.update(inputs(shown), now)
        previous = check_exact(book, previous)
    assert any(series.budgets["counters"].changes for series in book.series())  # places changed hands
    identities = {series.identity for series in book.series()}
    assert identities == {rank0, rank1}  # the unnamed set ended when b was named; a's restart made none
    rank0_series = next(series for series in book.series() if series.identity == rank0)
    assert rank0_series.total()[0] > (1 << 60)


def test_a_restart_of_the_same_rank_continues_its_series_and_a_gone_identity_ends_after_its_grace() -> None:
    from gpuobs.daemon.metric_identity import SeriesIdentity
    from gpuobs.daemon.metric_series import MAX_IDLE, SeriesBook

    rank = SeriesIdentity("host", "GPU-0", "0", "m", "3")
    book = SeriesBook(("launches", "blocks_observed"), 8, 2, rerank_s=60.0, grace_s=100.0)
    names = [f"k{i}" for i in range(5)]
    first = Fake("first.seg", rank, names, np.zeros(5, dtype=KERNEL_COUNTERS_DTYPE))
    first.counters["launches"] = [5, 4, 3, 2, 1]
    book.update(inputs([first]), 0.0)
    before = {(k.label, k.kid): k.values for k in next(book.series()).kernel_series("counters", book.counter_columns)}
    book.update([], 10.0)  # forgotten: kept, frozen
    assert len(list(book.series())) == 1 and next(book.series()).current() == []
    second = Fake("second.seg", rank, names, np.zeros(5, dtype=KERNEL_COUNTERS_DTYPE))
    second.counters["launches"] = [1, 1, 1, 1, 1]
    book.update(inputs([second]), 50.0)
    after = {(k.label, k.kid): k.values for k in next(book.series()).kernel_series("counters", book.counter_columns)}
    assert set(after) == set(before)  # no new set of series
    assert all(after[key][0] == before[key][0] + (1 if key[1] else 0) for key in before)
    book.update([], 60.0)
    book.update([], 159.0)
    assert len(list(book.series())) == 1
    book.update([], 160.0)  # grace over
    assert list(book.series()) == []
    # at most MAX_IDLE identities without a process, the oldest going first
    for index in range(MAX_IDLE + 5):
        gone = Fake(f"{index}.seg", SeriesIdentity("host", f"GPU-{index}"), names, np.zeros(5, KERNEL_COUNTERS_DTYPE))
        book.update(inputs([gone]), 200.0 + index / 100)
        book.update([], 200.0 + index / 100)
    kept = {series.identity.uuid for series in book.series()}
    assert len(kept) == MAX_IDLE and "GPU-0" not in kept and f"GPU-{MAX_IDLE + 4}" in kept


def test_identity_sources_read_as_proc_and_the_driver_lay_them_out(tmp_path: Path) -> None:
    from gpuobs.daemon.metric_identity import Pod, driver_gpus, host_name, pod_of, pod_uid

    uid = "0c8e4d7a-1b2c-4d3e-8f9a-0123456789ab"
    assert pod_uid(f"0::/kubepods/burstable/pod{uid}/3f1e0c") == uid
    systemd = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid.replace("-", "_") + ".slice/x"
    assert pod_uid(systemd) == uid
    assert pod_uid("0::/system.slice/vllm.service") == ""
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "cgroup").write_text(f"0::/kubepods/besteffort/pod{uid}/abc\n")
    (proc / "42" / "environ").write_bytes(
        b"PATH=/bin\0GPUOBS_POD_NAME=vllm-0\0GPUOBS_POD_NAMESPACE=serving\0GPUOBS_CONTAINER_NAME=engine\0"
    )
    assert pod_of(42, proc) == Pod(uid, "serving", "vllm-0", "engine")
    (proc / "42" / "environ").unlink()
    (proc / "42" / "environ").mkdir()  # unreadable (as another user's is without CAP_SYS_PTRACE)
    assert pod_of(42, proc) == Pod(uid)  # the UID alone
    (proc / "43").mkdir()
    (proc / "43" / "cgroup").write_text("0::/user.slice\n")
    (proc / "43" / "environ").write_bytes(b"GPUOBS_POD_NAME=stray\0")
    assert pod_of(43, proc) == Pod() and pod_of(44, proc) == Pod()  # outside a pod; gone
    gpus = tmp_path / "gpus"
    for bus, model in (("0000:5d:00.0", "NVIDIA H100 80GB HBM3"), ("0000:3b:00.0", "NVIDIA H100 80GB HBM3")):
        (gpus / bus).mkdir(parents=True)
        (gpus / bus / "information").write_text(f"Model: \t\t {model}\nIRQ:   \t\t 10\nDevice Minor: \t 7\n")
    listed = driver_gpus(gpus)
    assert listed[(0, 0x3B, 0, 0)].index == 0 and listed[(0, 0x5D, 0, 0)].device == "nvidia1"
    (gpus / "not-a-bus-id").mkdir()  # the driver's folder holds GPUs only; anything else is no GPU
    assert len(driver_gpus(gpus)) == 2
    assert driver_gpus(tmp_path / "none") == {}
    assert host_name({"NODE_NAME": "gpu-node-7"}) == "gpu-node-7" and host_name({})


def test_a_scrape_without_a_copy_of_the_counters_shows_the_last_values() -> None:
    """A producer may keep publishing through every try of a copy: that scrape shows the last
    values (not nothing, and not counts rebuilt from scratch, which made a counter fall)."""
    from gpuobs.daemon.metric_identity import SeriesIdentity
    from gpuobs.daemon.metric_series import SeriesBook

    book = SeriesBook(("launches",), 2, 0, rerank_s=60.0, grace_s=100.0)
    fake = Fake("p.seg", SeriesIdentity("host", "GPU-0"), ["a", "b", "c"], np.zeros(3, dtype=KERNEL_COUNTERS_DTYPE))
    fake.counters["launches"] = [5, 3, 1]

    def shown() -> dict[str, list[int]]:
        return {k.label: k.values for k in next(book.series()).kernel_series("counters", book.counter_columns)}

    book.update(inputs([fake]), 0.0)
    first = shown()
    assert first == {"a": [5], "b": [3], "other": [1]}
    copy = inputs([fake])
    copy[0].counters = None  # this scrape gets no copy
    book.update(copy, 1.0)
    assert shown() == first
    fake.counters["launches"] = [6, 3, 900]  # c is now the hottest: it waits for the re-rank
    book.update(inputs([fake]), 2.0)
    assert shown() == {"a": [6], "b": [3], "other": [900]}
