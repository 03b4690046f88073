"""Cross-process collectives (common/train/distributed.py): the differentiable all-gather on two processes has the
gradients of one process holding both shards."""

import os

import torch


def _gather_worker(rank, world, store, shards, out):
    import torch.distributed as dist

    from common.train.distributed import all_gather_with_grad
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    queries = shards[rank][0].clone().requires_grad_(True)
    docs = shards[rank][1].clone().requires_grad_(True)
    all_docs = all_gather_with_grad(docs)
    labels = torch.arange(len(queries)) + rank * len(queries)
    torch.nn.functional.cross_entropy(queries @ all_docs.T, labels).backward()
    torch.save({"q": queries.grad, "d": docs.grad}, os.path.join(out, f"grad_{rank}.pt"))
    dist.barrier()  # neither process tears gloo down while the other is still in a collective
    dist.destroy_process_group()
    os._exit(0)  # past the results: skip interpreter teardown, where gloo's threads can abort the process


def test_all_gather_with_grad_on_two_processes_equals_one_process_holding_both_shards(tmp_path):
    torch.manual_seed(0)
    queries, docs = torch.randn(6, 5), torch.randn(6, 5)
    shards = [(queries[:3], docs[:3]), (queries[3:], docs[3:])]
    # a file store rather than a TCP port: no race with other tests for a free port
    torch.multiprocessing.spawn(_gather_worker, args=(2, str(tmp_path / "store"), shards, str(tmp_path)), nprocs=2)
    q, d = queries.clone().requires_grad_(True), docs.clone().requires_grad_(True)
    torch.nn.functional.cross_entropy(q @ d.T, torch.arange(6)).backward()
    grads = [torch.load(tmp_path / f"grad_{r}.pt") for r in range(2)]
    # DDP averages parameter gradients over the 2 processes: the mean of the per-process losses' gradients
    torch.testing.assert_close(torch.cat([g["q"] for g in grads]) / 2, q.grad)
    torch.testing.assert_close(torch.cat([g["d"] for g in grads]) / 2, d.grad)
