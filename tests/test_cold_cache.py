"""cold_cache=true drops the data from the OS page cache by the best method the process may use,
says which, or says in one line why it could not; runs and the report mark cold and warm."""

from __future__ import annotations

import os

from segperf.data import cold
from segperf.data.carvana.layout import find_samples
from tests.test_datamodule import make_dm


def data_files(root) -> list:
    return [p for s in find_samples(root) for p in (s.image, s.mask)]


def test_as_root_it_syncs_and_writes_1_to_drop_caches(tiny_carvana, tmp_path, monkeypatch):
    drop_caches = tmp_path / "drop_caches"
    synced = []
    monkeypatch.setattr(cold, "DROP_CACHES", drop_caches)
    monkeypatch.setattr(cold.os, "geteuid", lambda: 0)
    monkeypatch.setattr(cold.os, "sync", lambda: synced.append(True))
    state = cold.drop_page_cache(data_files(tiny_carvana))
    assert (state.state, state.method) == ("cold", "drop_caches")
    assert drop_caches.read_text() == "1" and synced == [True]


def test_without_root_it_evicts_every_data_file_with_fadvise_and_says_so(tiny_carvana, monkeypatch):
    advised = []
    monkeypatch.setattr(cold.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(cold.os, "posix_fadvise", lambda fd, offset, length, advice: advised.append(advice))
    files = data_files(tiny_carvana)
    state = cold.drop_page_cache(files)
    assert (state.state, state.method) == ("cold", "posix_fadvise")
    assert advised == [os.POSIX_FADV_DONTNEED] * len(files) == [os.POSIX_FADV_DONTNEED] * 160
    assert "posix_fadvise DONTNEED on 160 data files" in state.message and "not root" in state.message


def test_when_it_cannot_it_says_why_in_one_line_and_counts_as_warm(tiny_carvana, monkeypatch):
    monkeypatch.setattr(cold.os, "geteuid", lambda: 1000)
    monkeypatch.delattr(cold.os, "posix_fadvise")
    state = cold.drop_page_cache(data_files(tiny_carvana))
    assert state.state == "warm" and state.method is None
    assert "could not" in state.message and "not root" in state.message and "\n" not in state.message


def test_a_run_records_whether_its_page_cache_was_cold(tiny_carvana, monkeypatch, capsys):
    monkeypatch.setattr(cold.os, "geteuid", lambda: 1000)  # never drop the whole machine's cache in tests
    assert make_dm(tiny_carvana).summary()["page_cache"] == "warm"
    summary = make_dm(tiny_carvana, cold_cache=True).summary()
    assert (summary["page_cache"], summary["page_cache_method"]) == ("cold", "posix_fadvise")
    assert "segperf: page cache: cold (posix_fadvise" in capsys.readouterr().out


def test_the_report_marks_cold_and_warm_runs(tmp_path):
    from segperf.report import build_report
    from segperf.report.sweep import load_sweep
    from tests.test_report import make_results, table_rows, write_sweep

    cold_run = make_results(2.0, dataset={"page_cache": "cold"})
    warm_run = make_results(2.5, workers=2, dataset={"page_cache": "warm"})
    sweep = write_sweep(tmp_path / "s", {"0_cold_cache=true": cold_run, "1_cold_cache=false": warm_run})
    report = build_report(load_sweep(sweep), tmp_path / "out", charts_too=False).read_text()
    rows = table_rows(report)
    assert rows["cold_cache=true"][2] == "cold" and rows["cold_cache=false"][2] == "warm"
    assert "| page cache |" in report

    all_warm = write_sweep(
        tmp_path / "w", {"0_workers=0": make_results(2.0), "1_workers=2": make_results(2.5, workers=2)}
    )
    report = build_report(load_sweep(all_warm), tmp_path / "out2", charts_too=False).read_text()
    assert "Page cache: warm in every run" in report
