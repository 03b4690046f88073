"""The MNRL objective (common/train/objectives/mnrl.py): gathered on two processes, the gradients of one process
with the whole batch; GradCache's gradients those of the plain loss; a run that selects its model on validation nDCG
and resumes bit-identically. The loss against sentence-transformers': test_losses.py."""

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file

from conftest import free_port, read_jsonl, script_module, train_in_process, unfinish


def _two_process_worker(rank, world, port, queries, docs, keys, out):
    import torch.distributed as dist
    from types import SimpleNamespace

    from common.train.objectives.mnrl import MNRLObjective
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    objective = MNRLObjective.__new__(MNRLObjective)
    objective.args = SimpleNamespace(gather=True, scale=20.0, symmetric=True, mask_duplicates=True)
    half = len(queries) // world
    q = queries[rank * half:(rank + 1) * half].clone().requires_grad_(True)
    d = docs[rank * half:(rank + 1) * half].clone().requires_grad_(True)
    objective.loss_from_embeddings((q, d), {"keys": keys[rank * half:(rank + 1) * half]})[0].mean().backward()
    torch.save({"q": q.grad, "d": d.grad}, os.path.join(out, f"rank_{rank}.pt"))
    dist.barrier()  # neither process tears gloo down while the other is still in a collective
    dist.destroy_process_group()
    os._exit(0)  # past the results: skip interpreter teardown, where gloo's threads can abort the process


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """One gloo run of two processes: gathered MNRL gradients."""
    out = tmp_path_factory.mktemp("gloo")
    torch.manual_seed(0)
    queries, docs = torch.randn(8, 6), torch.randn(8, 6)
    keys = torch.tensor([[i, i, i] for i in range(8)])
    keys[6, 1] = keys[1, 1]  # a duplicate abstract across the two processes
    torch.multiprocessing.spawn(_two_process_worker, args=(2, free_port(), queries, docs, keys, str(out)), nprocs=2)
    return {"queries": queries, "docs": docs, "keys": keys,
            "ranks": [torch.load(out / f"rank_{r}.pt") for r in range(2)]}


def test_mnrl_gathered_on_two_processes_has_the_gradients_of_one_process_with_the_whole_batch(two_processes):
    from types import SimpleNamespace

    from common.train.objectives.mnrl import MNRLObjective
    objective = MNRLObjective.__new__(MNRLObjective)
    objective.args = SimpleNamespace(gather=True, scale=20.0, symmetric=True, mask_duplicates=True)
    q = two_processes["queries"].clone().requires_grad_(True)
    d = two_processes["docs"].clone().requires_grad_(True)
    objective.loss_from_embeddings((q, d), {"keys": two_processes["keys"]})[0].mean().backward()
    grads = two_processes["ranks"]
    # DDP averages the two processes' parameter gradients
    torch.testing.assert_close(torch.cat([g["q"] for g in grads]) / 2, q.grad)
    torch.testing.assert_close(torch.cat([g["d"] for g in grads]) / 2, d.grad)


def train(data, model, out, objective, *extra):
    argv = ["--objective", objective, "--data", str(data), "--model", str(model), "--out", str(out),
            "--log-every", "1", *map(str, extra)]
    return train_in_process(argv)


def test_mnrl_with_gradcache_has_the_loss_and_gradients_of_the_plain_loss(tiny_model, paper_data, tmp_path):
    """03's GradCache backward (``--cache-chunk``) over chunks of 3 of a batch of 10 pairs, each chunk padded to its
    own longest document: the loss and gradients of the whole batch's plain backward."""
    from types import SimpleNamespace

    from accelerate import Accelerator

    from common.train.batches import CacheChunks
    from common.train.objectives.mnrl import MNRLObjective
    backward_cached = script_module("03_train.py").backward_cached
    found = []
    for chunk in (0, 3):
        args = SimpleNamespace(model=str(tiny_model), data=str(paper_data), pooling="mean", normalize=False,
                               max_length=32, query_max_length=16, length_groups=2, gather=True, scale=20.0,
                               symmetric=True, mask_duplicates=True, out=str(tmp_path / "run"))
        objective = MNRLObjective(args, None)
        model = objective.build()
        objective.load_data()
        model.eval()  # dropout off: the two computations then see the same network
        rows = objective.train_rows[:10]
        if chunk:
            batch = CacheChunks(objective, chunk)(rows)
            assert [len(part["q_index"]) for part in batch["chunks"]] == [3, 3, 3, 1]
            for n, part in enumerate(batch["chunks"]):
                mine = rows[n * chunk:(n + 1) * chunk]
                documents = part["groups"][min(args.length_groups, len(mine)):]
                assert max(ids.shape[1] for ids, _ in documents) == objective.docs.lengths()[mine[:, 1]].max()
            loss, logs = backward_cached(Accelerator(cpu=True), model, objective, batch)
        else:
            losses, logs = objective.losses(model, objective.collate(rows))
            loss = losses.mean()
            loss.backward()
        assert logs == {}
        found.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (whole, grads), (cached, cached_grads) = found
    assert cached == pytest.approx(whole, rel=1e-6)
    assert cached_grads.keys() == grads.keys()
    for name in grads:
        # fp32 sums in another order: torch's own float32 atol
        torch.testing.assert_close(cached_grads[name], grads[name], rtol=1e-4, atol=1e-5)


def test_mnrl_trains_selects_on_validation_ndcg_and_resumes_bit_identically(tiny_model, paper_data, tmp_path):
    extra = ["--max-length", "32", "--batch-size", "8", "--epochs", "2", "--checkpoint-every", "4", "--keep", "10",
             "--eval-every", "0", "--cache-chunk", "4", "--symmetric"]
    ref = tmp_path / "ref"
    counts = train(paper_data, tiny_model, ref, "mnrl", *extra)
    assert counts["steps"] == 8  # 36 pairs, batch 8, the last partial batch dropped
    validations = [r for r in read_jsonl(ref / "log.jsonl") if "val_ndcg@10" in r]
    assert counts["best_val_ndcg@10"] == max(r["val_ndcg@10"] for r in validations)
    assert json.loads((ref / "model" / "docembed.json").read_text())["similarity"] == "cosine"
    out = tmp_path / "resumed"
    import shutil
    shutil.copytree(ref, out)
    unfinish(out, model=False)  # RUN/model stays: it holds the best model of the steps before the checkpoint
    shutil.rmtree(out / "checkpoints" / "step_8")
    train(paper_data, tiny_model, out, "mnrl", *extra)
    final = "checkpoints/step_8/model.safetensors"
    a, b = load_file(str(ref / final)), load_file(str(out / final))
    assert all(torch.equal(a[k], b[k]) for k in a)

    def log(run):
        return [{k: v for k, v in r.items() if k != "steps_per_s"} for r in read_jsonl(run / "log.jsonl")]
    assert log(out) == log(ref)
