"""The training losses (common/train/losses.py), in its order, each held to its reference library's figure: the
triplet margin to torch's ``TripletMarginLoss`` and sentence-transformers' ``TripletLoss``, the key-sentence pair
losses to sentence-transformers' ``ContrastiveLoss`` and ``CosineSimilarityLoss``, MNRL to sentence-transformers'
``MultipleNegativesRankingLoss`` (one direction and both), BERT's masked-LM and next-sentence losses to transformers'
``BertForPreTraining``; and each computed in float32 from half-precision inputs (``precision.in_fp32``, itself
tested in test_precision.py). Distillation's losses (common/distill/) are held to theirs in test_distill_losses.py;
the masked LM's predictions to ``BertForMaskedLM``'s in test_masked_lm.py."""

import pytest
import torch
import torch.nn.functional as F

from conftest import st_losses
from common.train import losses

HALF = (torch.bfloat16, torch.float16)


def halves(*shape, n=3, seed=0):
    """``n`` random tensors in bfloat16 (exactly representable in float16 too after the cast below)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).to(torch.bfloat16) for _ in range(n)]


def cos(u, v):
    return (u * v).sum(-1) / (u.norm(dim=-1) * v.norm(dim=-1))


def check(got, expected):
    """A loss on half-precision inputs is the float32 loss of the same (up-cast) values: float32 and within
    float32 rounding, where a half-precision computation would be off by about 1e-2 (bfloat16's 8 bits)."""
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


# -- in float32 under autocast ----------------------------------------------------------------------------------------

def test_losses_leave_autocast_and_compute_in_float32():
    q, p, n = (x.float() for x in halves(16, 64))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = losses.triplet_margin(q, p, n)
        scores = losses.multiple_negatives_ranking(q, p)
    check(inside, losses.triplet_margin(q, p, n))
    check(scores, losses.multiple_negatives_ranking(q, p))


# -- triplet_margin ---------------------------------------------------------------------------------------------------

def test_triplet_loss_equals_torch_and_sentence_transformers():
    TripletDistanceMetric, TripletLoss = st_losses().TripletDistanceMetric, st_losses().TripletLoss
    g = torch.Generator().manual_seed(0)
    q, p, n = (torch.randn(32, 24, generator=g) for _ in range(3))
    ours = losses.triplet_margin(q, p, n, margin=1.0).mean()
    torch_loss = torch.nn.TripletMarginLoss(margin=1.0, p=2)(q, p, n)
    st = TripletLoss(model=None, distance_metric=TripletDistanceMetric.EUCLIDEAN, triplet_margin=1.0)
    st_loss = st.compute_loss_from_embeddings([q, p, n], labels=None)
    torch.testing.assert_close(ours, torch_loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ours, st_loss, rtol=1e-6, atol=1e-7)
    assert 0 < ours.item()


@pytest.mark.parametrize("dtype", HALF)
def test_triplet_margin_of_half_embeddings_is_the_float32_margin(dtype):
    q, p, n = (x.to(dtype) for x in halves(16, 64))
    qf, pf, nf = q.float(), p.float(), n.float()

    def distance(a, b):  # torch's pairwise_distance adds its epsilon to the difference
        return (a - b + 1e-6).pow(2).sum(-1).sqrt()
    check(losses.triplet_margin(q, p, n, 1.0), F.relu(distance(qf, pf) - distance(qf, nf) + 1.0))


# -- contrastive_cosine, cosine_mse -----------------------------------------------------------------------------------

def test_pair_losses_equal_sentence_transformers():
    st = st_losses()
    g = torch.Generator().manual_seed(1)
    u, v = torch.randn(40, 16, generator=g), torch.randn(40, 16, generator=g)
    v[:5] = u[:5] + 0.1 * v[:5]  # some close pairs, so both branches of the contrastive loss are used
    labels = torch.randint(0, 2, (40,), generator=g)
    contrastive = st.ContrastiveLoss(model=None, distance_metric=st.SiameseDistanceMetric.COSINE_DISTANCE, margin=0.5)
    torch.testing.assert_close(losses.contrastive_cosine(u, v, labels, 0.5).mean(),
                               contrastive.compute_loss_from_embeddings([u, v], labels), rtol=1e-6, atol=1e-7)
    cosine = st.CosineSimilarityLoss(model=None)
    torch.testing.assert_close(losses.cosine_mse(u, v, labels).mean(),
                               cosine.compute_loss_from_embeddings([u, v], labels), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", HALF)
def test_cosine_losses_of_half_embeddings_are_the_float32_losses(dtype):
    u, v = (x.to(dtype) for x in halves(16, 64, n=2))
    labels = torch.tensor([0, 1] * 8)
    d = 1 - cos(u.float(), v.float())
    check(losses.contrastive_cosine(u, v, labels, 0.5),
          0.5 * (labels * d.pow(2) + (1 - labels) * F.relu(0.5 - d).pow(2)))
    check(losses.cosine_mse(u, v, labels), (cos(u.float(), v.float()) - labels).pow(2))


# -- multiple_negatives_ranking ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("symmetric", [False, True])
def test_mnrl_loss_equals_sentence_transformers(symmetric):
    torch.manual_seed(0)
    q, d = torch.randn(8, 16, dtype=torch.float64), torch.randn(8, 16, dtype=torch.float64)
    kwargs = {"directions": ("query_to_doc", "doc_to_query"), "partition_mode": "per_direction"} if symmetric else {}
    reference = st_losses().MultipleNegativesRankingLoss(model=None, scale=20.0, **kwargs)
    expected = reference.compute_loss_from_embeddings([q.float(), d.float()], None)
    ours = losses.multiple_negatives_ranking(q.float(), d.float(), scale=20.0, symmetric=symmetric)
    torch.testing.assert_close(ours.mean(), expected, rtol=1e-6, atol=1e-6)


def test_a_masked_false_negative_is_as_if_the_duplicate_were_not_in_the_batch():
    from common.train.objectives.mnrl import false_negative_mask
    torch.manual_seed(1)
    q, d = torch.randn(4, 8), torch.randn(4, 8)
    keys = torch.tensor([[0, 0, 0], [1, 1, 1], [2, 1, 2], [3, 3, 3]])  # docs 1 and 2 share an abstract
    mask = false_negative_mask(keys, keys, 0)
    assert mask.nonzero().tolist() == [[1, 2], [2, 1]]
    loss = losses.multiple_negatives_ranking(q, d, false_negatives=mask)
    keep = [0, 1, 3]
    expected = F.cross_entropy(20 * F.normalize(q[[1]]) @ F.normalize(d[keep]).T, torch.tensor([1]))
    torch.testing.assert_close(loss[1], expected)


@pytest.mark.parametrize("dtype", HALF)
def test_mnrl_of_half_embeddings_is_the_float32_cross_entropy(dtype):
    q, d = (x.to(dtype) for x in halves(8, 32, n=2))
    scores = 20 * cos(q.float()[:, None, :], d.float()[None, :, :])
    check(losses.multiple_negatives_ranking(q, d), torch.logsumexp(scores, 1) - scores.diagonal())


# -- masked_lm, next_sentence -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", HALF)
def test_masked_lm_of_half_logits_is_the_float32_cross_entropy(dtype):
    logits, = (x.to(dtype) for x in halves(12, 50, n=1))
    labels = torch.arange(12) * 4
    up = logits.float()
    check(losses.masked_lm(logits, labels), torch.logsumexp(up, 1) - up[torch.arange(12), labels])


@pytest.mark.parametrize("padded", [False, True])
def test_the_pretraining_loss_is_bert_for_pretraining_loss_with_its_gradients(padded):
    """The same weights and inputs (token types, masked-LM labels, next-sentence labels): the loss, its two terms
    in the training log, and every parameter's gradient are transformers' BertForPreTraining's, with the last layer
    run at the masked positions and [CLS] only."""
    import copy
    from types import SimpleNamespace
    from transformers import BertConfig, BertForPreTraining
    from common.models import cpu
    from common.models.masked_lm import MaskedLM
    from common.train.masking import IGNORE
    from common.train.objectives.mlm import MLMObjective
    torch.manual_seed(0)
    reference = BertForPreTraining(BertConfig(vocab_size=90, hidden_size=32, num_hidden_layers=2,
                                              num_attention_heads=2, intermediate_size=64, max_position_embeddings=64))
    model = cpu.install(MaskedLM(copy.deepcopy(reference), "mean", False, nsp=True))
    ids = torch.randint(5, 90, (4, 24))
    attention_mask = torch.ones_like(ids)
    types = torch.zeros_like(ids)
    types[:, 11:] = 1
    if padded:
        attention_mask[1, 17:] = 0
        attention_mask[3, 9:] = 0
        types[3] = 0
        types[3, 5:9] = 1
    masked = (torch.rand(4, 24) < 0.25) & attention_mask.bool()
    masked[:, 0] = False
    masked[2, 3] = True
    labels = torch.where(masked, ids, torch.full_like(ids, IGNORE))
    following = torch.tensor([0, 1, 1, 0])
    batch = {"input_ids": ids, "attention_mask": attention_mask, "token_type_ids": types, "labels": labels,
             "next_sentence_label": following}
    objective = MLMObjective(SimpleNamespace(nsp=True), None)
    model.eval(), reference.eval()
    ours, logged = objective.losses(model, batch)
    theirs = reference(**batch)
    torch.testing.assert_close(ours, theirs.loss, rtol=0, atol=1e-5)
    assert not any(value.requires_grad for value in logged.values())
    logged = {name: value.item() for name, value in logged.items()}
    nsp_loss = F.cross_entropy(theirs.seq_relationship_logits, following).item()
    assert logged["nsp_loss"] == pytest.approx(nsp_loss, abs=1e-5)
    assert logged["mlm_loss"] == pytest.approx(theirs.loss.item() - nsp_loss, abs=1e-5)
    assert logged["nsp_accuracy"] == float((theirs.seq_relationship_logits.argmax(-1) == following).float().mean())
    ours.backward()
    theirs.loss.backward()
    reference_grads = dict(reference.named_parameters())
    for name, p in model.mlm.named_parameters():
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, reference_grads[name].grad, rtol=0, atol=1e-5, msg=name)
    assert model.mlm.bert.pooler.dense.weight.grad.abs().sum() > 0
