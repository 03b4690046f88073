"""bench/gpu.py's pieces that need no GPU: which rows run in which shape, the step times it reads from a run's log,
the table with its projections, and the section it writes into bench/results.md."""

import json
from types import SimpleNamespace

from bench import gpu


def args(**kw):
    base = dict(rows="embed-300,embed-20000,triplet,mnrl,mlm,distill", base_rows="triplet,mlm", dry=False,
                passed=[], triplet_batch=16, triplet_length=128)
    return SimpleNamespace(**{**base, **kw})


def test_rows_run_in_the_minilm_shape_then_the_base_rows_then_the_longformer_rows_in_the_bert_base_shape():
    assert gpu.rows_to_run(args()) == [
        ("embed-300", "minilm"), ("embed-20000", "minilm"), ("triplet", "minilm"), ("mnrl", "minilm"),
        ("mlm", "minilm"), ("triplet", "bert-base"), ("mlm", "bert-base"), ("distill", "bert-base")]
    assert gpu.rows_to_run(args(rows="mnrl", base_rows="triplet")) == [("mnrl", "minilm")]
    assert gpu.rows_to_run(args(rows="long-train,embed-300,long-embed,distill", base_rows="long-embed")) == [
        ("embed-300", "minilm"), ("distill", "bert-base"), ("long-embed", "bert-base"), ("long-train", "bert-base")]


def test_the_tiny_rows_run_in_the_tiny_shape_alone():
    assert gpu.rows_to_run(args(rows="tiny-mlm,mlm,tiny-embed,distill", base_rows="mlm,tiny-mlm")) == [
        ("tiny-mlm", "tiny"), ("mlm", "minilm"), ("tiny-embed", "tiny"), ("mlm", "bert-base"), ("distill", "bert-base")]


def test_step_times_give_each_step_of_a_record_its_mean_interval(tmp_path):
    log = tmp_path / "log.jsonl"
    records = [{"step": 10, "steps_per_s": 2.0}, {"step": 20, "steps_per_s": 4.0}, {"step": 20, "val_loss": 0.5},
               {"step": 30, "steps_per_s": 0.5}, {"step": 35, "steps_per_s": 5.0}]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert gpu.step_times(log) == [0.5] * 10 + [0.25] * 10 + [0.2] * 5


def test_step_times_leave_out_the_interval_after_each_validation(tmp_path):
    log = tmp_path / "log.jsonl"
    records = [{"step": 1, "steps_per_s": 2.0}, {"step": 2, "steps_per_s": 4.0}, {"step": 2, "val_loss": 0.5},
               {"step": 3, "steps_per_s": 0.5}, {"step": 4, "steps_per_s": 5.0}]
    log.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 5, "steps_')  # the last half-written
    assert gpu.step_times(log) == [0.5, 0.25, 0.2]
    assert gpu.step_times(tmp_path / "absent.jsonl") == []


def test_the_table_gives_each_row_beside_theirs_with_its_share_of_the_peak_and_the_projections():
    side = {"rate": 50.0, "seconds": 10.5, "peak": 2 * 2 ** 30}
    results = {("triplet", "bert-base"): {"unit": "steps/s", "flops": 4e12, "ours": side,
                                          "theirs": {"rate": 20.0, "seconds": 12.0, "peak": 3 * 2 ** 30}},
               ("distill", "bert-base"): {"unit": "steps/s", "flops": 1e14, "theirs": None,
                                          "ours": {"rate": 1.0, "seconds": 11.0, "peak": 40 * 2 ** 30}}}
    lines = gpu.table(args(), results, {"flops": 800e12, "what": "8192 × 8192 bfloat16 torch.mm, best of 10"},
                      "NVIDIA H200", 400)
    assert lines[0] == "`bash bench/gpu.sh` on NVIDIA H200; 400 s in all."
    assert lines[2].startswith("Peak: 800.0 TFLOP/s (8192 × 8192 bfloat16 torch.mm, best of 10, measured in this "
                               "run). Precision: ours bf16 autocast")
    assert lines[6] == ("| triplet | bert-base | 50.00 steps/s | 20.00 steps/s | **2.50×** | ≥ 2.0× | 200.0 / 80.0 "
                        "(25% / 10%) | 2.0 GiB / 3.0 GiB | 10.5 / 12.0 |")
    assert lines[7] == ("| distill | bert-base | 1.00 steps/s | thesis: ~30 GPU-hours | — | — | 100.0 (12%) | "
                        "40.0 GiB | 11.0 |")
    # 4.2M triplets / (50 steps/s × 16) / 3600 s; 1M documents / (1 step/s × 6) / 3600 s
    assert lines[9] == ("WikiSpecter's run (2.1M triplets × 2 epochs, BERT-base, 128 tokens; the thesis: 4 GPUs × "
                        "~12 hours) projects to **1.46 hours** on this one device (800 triplets/s, batch 16; goal ≤ "
                        "1 hour).")
    assert lines[10].startswith("The distillation thesis's student (1M documents, batch 60, 4096 tokens) projects "
                                "to **46.3 GPU-hours** (the thesis: ~30), from 6.00 documents/s")


def test_the_section_replaces_its_earlier_self_and_keeps_the_other_sections(tmp_path):
    path = tmp_path / "results.md"
    path.write_text("# Benchmarks\n\ntable\n\n## Scale\n\nscale\n")
    gpu.write_section(path, ["first", ""])
    assert path.read_text() == ("# Benchmarks\n\ntable\n\n## Scale\n\nscale\n\n## GPU benchmark (bench/gpu.sh)\n\n"
                                "first\n")
    path.write_text(path.read_text() + "\n## Later\n\nkept\n")
    gpu.write_section(path, ["second"])
    assert path.read_text() == ("# Benchmarks\n\ntable\n\n## Scale\n\nscale\n\n## Later\n\nkept\n\n"
                                "## GPU benchmark (bench/gpu.sh)\n\nsecond\n")
