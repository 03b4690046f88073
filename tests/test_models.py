"""Encoders: input encoding, pooling, saving in sentence-transformers form, the triplet batch. The triplet loss
against torch's and sentence-transformers': test_losses.py."""

import numpy as np
import pytest
import torch

from conftest import script_module
from common.models.batching import length_batches
from common.models.encoder import Encoder, document_text
from common.models.inference import embed
from common.models.loading import load_encoder, st_config
from common.models.saving import save_model
from common.models.tokens import TokenStore


def test_document_input_is_cls_title_sep_text_sep(tiny_model):
    _, tokenizer, _ = load_encoder(str(tiny_model))
    text = document_text("Kaupunki", "joki meri", tokenizer.sep_token)
    assert text == "Kaupunki[SEP]joki meri"
    store = TokenStore(tokenizer, [text, "joki " * 50], max_length=8)
    assert tokenizer.convert_ids_to_tokens(store.get(0).tolist()) == \
        ["[CLS]", "K", "##aupunki", "[SEP]", "joki", "meri", "[SEP]"]
    truncated = tokenizer.convert_ids_to_tokens(store.get(1).tolist())
    assert len(truncated) == 8 and truncated[0] == "[CLS]" and truncated[-1] == "[SEP]"


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_pooling_reads_the_first_token_or_the_unpadded_mean(tiny_model, pooling):
    encoder, tokenizer, _ = load_encoder(str(tiny_model), pooling=pooling)
    encoder.eval()
    store = TokenStore(tokenizer, ["kaupunki", "joki meri vuori metsä järvi saari"], 16)
    ids, mask = store.pad([0, 1])
    with torch.no_grad():
        batch = encoder.embed(ids, mask)
        hidden = encoder.transformer(input_ids=ids[:1, :3], attention_mask=mask[:1, :3]).last_hidden_state[0]
    expected = hidden[0] if pooling == "cls" else hidden.mean(0)
    torch.testing.assert_close(batch[0], expected, rtol=1e-5, atol=1e-6)  # padding does not change the vector


@pytest.mark.parametrize("pooling,normalize", [("cls", False), ("mean", False), ("mean", True)])
def test_saved_model_gives_the_same_embeddings_in_sentence_transformers(tiny_model, tmp_path, pooling, normalize):
    from sentence_transformers import SentenceTransformer
    from conftest import corpus_text
    encoder, tokenizer, _ = load_encoder(str(tiny_model), pooling=pooling, normalize=normalize)
    save_model(encoder, tokenizer, str(tmp_path / "model"), max_length=12)
    assert st_config(str(tmp_path / "model")) == {"pooling": pooling, "normalize": normalize, "max_length": 12}
    titles, texts = corpus_text(3, 20), corpus_text(4, 20)
    inputs = [document_text(a, b, tokenizer.sep_token) for a, b in zip(titles, texts)]
    reloaded, tok, settings = load_encoder(str(tmp_path / "model"))
    assert (settings["pooling"], settings["normalize"], settings["max_length"]) == (pooling, normalize, 12)
    ours = embed(reloaded, TokenStore(tok, inputs, settings["max_length"]), batch_size=7)
    st = SentenceTransformer(str(tmp_path / "model"), device="cpu")
    assert st.max_seq_length == 12
    theirs = st.encode(inputs, batch_size=5, convert_to_numpy=True)
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)


def test_a_saved_tokenizer_is_the_same_files_whatever_it_tokenised_last(tiny_model, tmp_path):
    import filecmp
    encoder, tokenizer, _ = load_encoder(str(tiny_model))
    save_model(encoder, tokenizer, str(tmp_path / "fresh"), max_length=12)
    tokenizer(["joki meri vuori", "meri"], truncation=True, max_length=3, padding=True)
    backend = tokenizer.backend_tokenizer
    left = (backend.truncation, backend.padding)
    save_model(encoder, tokenizer, str(tmp_path / "used"), max_length=12)
    assert filecmp.cmp(tmp_path / "fresh" / "tokenizer.json", tmp_path / "used" / "tokenizer.json", shallow=False)
    assert left[0]["max_length"] == 3 and (backend.truncation, backend.padding) == left  # put back as it was


def test_length_batches_sort_once_and_cut_by_count_and_by_padded_tokens():
    lengths = [3, 10, 7, 10, 2, 5]
    assert [b.tolist() for b in length_batches(lengths, 3)] == [[1, 3, 2], [5, 0, 4]]
    # 20 padded tokens: two texts of 10, two of 7, then three of at most 3
    assert [b.tolist() for b in length_batches(lengths, 3, batch_tokens=20)] == [[1, 3], [2, 5], [0, 4]]
    assert [b.tolist() for b in length_batches([30, 5], 8, batch_tokens=20)] == [[0], [1]]  # over budget: alone


def test_the_token_budget_is_the_flag_where_given_else_the_devices_own():
    from common.models.batching import token_budget
    assert [token_budget(None, "cpu"), token_budget(None, "cuda"), token_budget(0, "cpu"), token_budget(40, "cuda")] \
        == [2048, 16384, 0, 40]


@pytest.mark.parametrize("batch_size,batch_tokens", [(64, 0), (1, 0), (64, 40), (3, 100), (64, None)])
def test_embedding_equals_sentence_transformers_encode_in_fp32_under_any_batching(tiny_model, tmp_path, batch_size,
                                                                                  batch_tokens):
    from sentence_transformers import SentenceTransformer
    from conftest import corpus_text
    encoder, tokenizer, _ = load_encoder(str(tiny_model), pooling="mean", normalize=True)
    save_model(encoder, tokenizer, str(tmp_path / "model"), max_length=16)
    texts = corpus_text(6, 30) + ["meri", "joki " * 40]  # mixed lengths, one cut at 16 tokens
    reloaded, tok, settings = load_encoder(str(tmp_path / "model"))
    ours = embed(reloaded, TokenStore(tok, texts, settings["max_length"]), batch_size, batch_tokens)
    theirs = SentenceTransformer(str(tmp_path / "model"), device="cpu").encode(texts, batch_size=8)
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)


def test_embed_writes_its_rows_into_a_memory_mapped_npy_with_the_bytes_of_np_save(tiny_model, tmp_path):
    from common.outdir.folders import Outputs
    from common.vectors import open_npy
    from conftest import corpus_text
    encoder, tokenizer, _ = load_encoder(str(tiny_model), pooling="mean")
    store = TokenStore(tokenizer, corpus_text(5, 30), 24)
    expected = embed(encoder, store, 64, 50)
    with Outputs(str(tmp_path / "out")) as outputs:
        out = open_npy(outputs, "v.npy", expected.shape)
        assert embed(encoder, store, 64, 50, out=out) is out
        assert not (tmp_path / "out" / "v.npy").exists()  # committed with the folder
    np.save(tmp_path / "reference.npy", expected)
    assert (tmp_path / "out" / "v.npy").read_bytes() == (tmp_path / "reference.npy").read_bytes()


@pytest.mark.parametrize("first", [[4, 0, 17, 4], [], list(range(30))])
def test_rows_embedded_first_are_in_when_ready_is_called_and_the_whole_equals_one_pass(tiny_model, first):
    """05 starts its topic classifiers on the topic documents' vectors while the rest is embedded: ``ready`` is called
    once, when the rows ``first`` hold their vectors and no other row has been written, and the vectors at the end
    are one pass's (up to the rounding of a product of another shape)."""
    from conftest import corpus_text
    from common.models.inference import embed_sharded
    encoder, tokenizer, _ = load_encoder(str(tiny_model), pooling="mean")
    store = TokenStore(tokenizer, corpus_text(30, 30), 24)
    expected = embed(encoder, store, 8, 0)
    seen = []

    def ready(out):
        seen.append(out.copy())
    found = embed_sharded(encoder, store, 8, 0, first=np.array(first, dtype=np.int64), ready=ready)
    np.testing.assert_allclose(found, expected, rtol=0, atol=1e-6)
    if not first:
        assert seen == []
        return
    assert len(seen) == 1
    rows = sorted(set(first))
    np.testing.assert_allclose(seen[0][rows], expected[rows], rtol=0, atol=1e-6)
    assert not seen[0][np.setdiff1d(np.arange(30), rows)].any()


def test_triplet_batch_embeds_each_document_once_in_query_positive_negative_order(tiny_model, tiny_data,
                                                                                 tmp_path):
    from common.train.objectives.triplet import TripletObjective
    args = script_module("03_train.py").parse_args(["--data", str(tiny_data), "--model", str(tiny_model), "--out",
                                                    str(tmp_path / "run"), "--pooling", "mean", "--max-length", "32"])
    objective = TripletObjective(args, None)
    encoder = objective.build()
    encoder.eval()
    objective.load_data()
    rows = objective.train_rows[:6].copy()
    rows[1, 0] = rows[0, 0]  # a repeated query
    batch = objective.collate(rows)
    assert sum(len(ids) for ids, _ in batch["groups"]) == len(np.unique(rows))
    with torch.no_grad():
        emb = encoder(batch["groups"])[batch["index"]]
        single = torch.stack([encoder.embed(*objective.store.pad([i])) [0] for i in rows.T.ravel()])
    torch.testing.assert_close(emb, single, rtol=1e-4, atol=1e-5)


def test_encoder_rejects_unknown_pooling(tiny_model):
    encoder, _, _ = load_encoder(str(tiny_model))
    with pytest.raises(ValueError):
        Encoder(encoder.transformer, pooling="max")


class _PositionalTokens(torch.nn.Module):
    """A stand-in transformer without attention: each token's state depends on its id and its position only, so an
    unpadded (packed) batch and a padded one must give the same states where the padded one has tokens."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.tokens, self.positions = torch.nn.Embedding(50, 6), torch.nn.Embedding(20, 6)
        self.config = type("Config", (), {"hidden_size": 6})()

    def forward(self, input_ids, attention_mask=None, position_ids=None, **flash_kwargs):
        from types import SimpleNamespace
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1])[None].expand_as(input_ids)
        return SimpleNamespace(last_hidden_state=self.tokens(input_ids) * 2 + self.positions(position_ids))


def _store(texts):
    """A TokenStore holding ``texts`` (token ids, special tokens included) as tokenising would, padded with 0."""
    store = TokenStore.__new__(TokenStore)
    store.ids = np.concatenate(texts).astype(np.int32)
    store.offsets = np.concatenate([[0], np.cumsum([len(t) for t in texts])]).astype(np.int64)
    store.pad_id = 0
    return store


@pytest.mark.parametrize("pooling,normalize", [("mean", False), ("mean", True), ("cls", False)])
def test_unpadded_embedding_pools_each_text_as_the_padded_one(pooling, normalize):
    """``Encoder.embed_packed`` (the GPU's variable-length path): positions restart at each text and each text's
    states pool alone, so the vectors equal ``embed`` on padded batches."""
    encoder = Encoder(_PositionalTokens(), pooling, normalize)
    texts = [[2, 7, 9, 3], [2, 5, 3], [2, 11, 12, 13, 14, 15, 16, 3], [2, 3]]
    store = _store(texts)
    rows = [2, 0, 3, 1]
    ids, lengths = store.packed(rows)
    assert ids.tolist() == [t for r in rows for t in texts[r]] and lengths.tolist() == [8, 4, 2, 3]
    with torch.no_grad():
        packed = encoder.embed_packed(ids, lengths)
        padded = encoder.embed(*store.pad(rows))
    torch.testing.assert_close(packed, padded, rtol=1e-6, atol=1e-6)


def test_a_packed_batch_holds_the_padded_groups_texts_end_to_end_in_their_order_with_the_same_rows():
    """``TokenStore.groups(..., packed=True)``, what collate makes on a CPU: the texts of the length-sorted padded
    groups in the same order, unpadded, as one ``Packed`` group, and the same row of each input position."""
    from common.models.tokens import Packed
    texts = [[2, 7, 9, 3], [2, 5, 3], [2, 11, 12, 13, 14, 15, 16, 3], [2, 3]]
    store = _store(texts)
    rows = [2, 0, 3, 1]
    padded, row = store.groups(rows, 2)
    (packed,), packed_row = store.groups(rows, 2, packed=True)
    assert isinstance(packed, Packed) and torch.equal(packed_row, row) and row.tolist() == [3, 2, 0, 1]
    assert packed.lengths.tolist() == [2, 3, 4, 8]
    assert packed.ids.tolist() == texts[3] + texts[1] + texts[0] + texts[2] == \
        torch.cat([ids[mask.bool()] for ids, mask in padded]).tolist()
