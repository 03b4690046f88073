"""How a corpus is embedded (common/models/inference.py, common/eval/embedding.py): in one shard per process on two
processes, the vectors of one, with a helping process that keeps nothing; texts streamed from docs.jsonl into the
token store as the list would be; each batch's vectors copied to the host once, and nothing else waited for."""

import os
import shutil

import numpy as np
import pytest
import torch

from conftest import corpus_text, forget_hashes, free_port
from test_train import recording

from common.io import InputError


def _two_process_worker(rank, world, port, model, texts, out):
    import torch.distributed as dist

    from common.models.inference import embed_sharded
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    encoder, tok, _ = load_encoder(model, pooling="mean", max_length=32)
    store = TokenStore(tok, texts, 32)
    vecs = torch.from_numpy(embed_sharded(encoder, store, batch_size=4))
    # a helping process (05's followers) takes part in the gathering and keeps nothing
    kept = embed_sharded(encoder, store, batch_size=4, block=5, collect=rank == 0)
    torch.save({"vecs": vecs, "kept": None if kept is None else torch.from_numpy(kept)},
               os.path.join(out, f"rank_{rank}.pt"))
    dist.barrier()  # neither process tears gloo down while the other is still in a collective
    dist.destroy_process_group()
    os._exit(0)  # past the results: skip interpreter teardown, where gloo's threads can abort the process


@pytest.fixture(scope="module")
def two_processes(tiny_model, tmp_path_factory):
    """One gloo run of two processes: the corpus embedded in two shards."""
    out = tmp_path_factory.mktemp("gloo")
    texts = corpus_text(9, 23)
    torch.multiprocessing.spawn(_two_process_worker, args=(2, free_port(), str(tiny_model), texts, str(out)),
                                nprocs=2)
    return {"texts": texts, "ranks": [torch.load(out / f"rank_{r}.pt") for r in range(2)]}


def test_sharded_embedding_on_two_processes_gives_the_vectors_of_one(tiny_model, two_processes):
    from common.models.inference import embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    encoder, tok, _ = load_encoder(str(tiny_model), pooling="mean", max_length=32)
    one = embed(encoder, TokenStore(tok, two_processes["texts"], 32), batch_size=4)
    for rank in two_processes["ranks"]:
        np.testing.assert_allclose(rank["vecs"].numpy(), one, rtol=1e-5, atol=1e-6)
    main, helper = two_processes["ranks"]
    assert helper["kept"] is None
    np.testing.assert_allclose(main["kept"].numpy(), one, rtol=1e-5, atol=1e-6)  # gathered 5 rows at a time


def test_paper_texts_stream_from_docs_jsonl_into_the_token_store_as_the_list_would(tiny_model, paper_data, tmp_path):
    from transformers import AutoTokenizer

    from common.data.docs_jsonl import Documents
    from common.models.tokens import TokenStore
    kept, streamed = Documents(paper_data), Documents(paper_data, texts=False)
    assert streamed.texts is None and list(streamed.stream_texts()) == kept.texts
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    a, b = TokenStore(tok, kept.texts, 32, batch=7), TokenStore(tok, streamed.stream_texts(), 32, batch=7)
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.offsets, b.offsets) and len(b) == len(kept.ids)
    changed = tmp_path / "data"
    shutil.copytree(paper_data, changed)
    forget_hashes(changed)
    docs = Documents(changed, texts=False)
    lines = (changed / "docs.jsonl").read_text().splitlines()
    (changed / "docs.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # a document gone since it was read
    with pytest.raises(InputError) as e:
        list(docs.stream_texts())
    assert str(e.value) == f"{changed / 'docs.jsonl'}: changed while it was being read"


def test_embedding_copies_each_batchs_vectors_once_and_waits_for_nothing_else(tiny_model, monkeypatch):
    from common.models.inference import embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    encoder, tokenizer, _ = load_encoder(tiny_model, pooling="mean", max_length=32)
    store = TokenStore(tokenizer, [f"text {i} " + "word " * (i % 9) for i in range(23)], 32)
    inside = embed.__wrapped__.__code__ if hasattr(embed, "__wrapped__") else embed.__code__
    mode = recording(monkeypatch, lambda frames: any(f.f_code is inside for f in frames))
    with mode:
        vectors = embed(encoder, store, batch_size=5, batch_tokens=0)
    assert vectors.shape == (23, encoder.dimension)
    # 23 texts in batches of 5: one copy each, from one place
    assert [found[:3] for found in mode.found] == [(".cpu()", "common/models/inference.py", "embed")] * 5
    assert len({found[3] for found in mode.found}) == 1


@pytest.mark.parametrize("value", ["two", "0", "-1"])
def test_a_launch_size_that_is_no_whole_number_from_1_is_one_line_before_05_joins(monkeypatch, value):
    from common.eval.embedding import process_state
    monkeypatch.setenv("WORLD_SIZE", value)
    with pytest.raises(InputError) as e:
        process_state()
    assert str(e.value) == (f"WORLD_SIZE={value!r}: the number of processes a launcher starts must be a whole "
                            "number from 1")
