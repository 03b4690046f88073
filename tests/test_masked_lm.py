"""The masked LM (common/models/masked_lm.py, and on a CPU at ``masked_positions``, where it runs BERT's last layer
on the masked positions only) against transformers' ``BertForMaskedLM``: its logits at the masked
positions and the gradients of its loss, and a batch with nothing masked."""

import argparse

import pytest


@pytest.mark.parametrize("padded", [False, True])
def test_the_masked_lm_predicts_as_bert_for_masked_lm_with_its_last_layer_on_masked_positions_only(tiny_model,
                                                                                                    padded):
    """MaskedLM is transformers' BertForMaskedLM; on a CPU (``cpu.install``) it runs BERT's last layer on the masked
    positions alone (keys and values from every position): in evaluation its logits are the reference's at those
    positions, for full blocks and for padded rows; in training every parameter of the last layer gets a gradient,
    and the loss matches the reference's."""
    import torch
    from transformers import BertForMaskedLM
    from common.models import cpu
    from common.train import losses
    from common.models.masked_lm import MaskedLM
    from common.train.masking import IGNORE
    torch.manual_seed(0)
    import copy
    reference = BertForMaskedLM.from_pretrained(tiny_model)  # its masked-LM head newly initialised: copied as it is
    plain = MaskedLM(copy.deepcopy(reference), "mean", False)
    model = cpu.install(MaskedLM(copy.deepcopy(reference), "mean", False))
    assert model.masked_positions and not plain.masked_positions
    ids = torch.randint(5, reference.config.vocab_size, (3, 24))
    attention_mask = torch.ones_like(ids)
    if padded:
        attention_mask[1, 17:] = 0
        attention_mask[2, 9:] = 0
    masked = (torch.rand(3, 24) < 0.3) & attention_mask.bool()
    masked[0, :2] = True  # rows with different numbers of masked positions
    labels = torch.where(masked, ids, torch.full_like(ids, IGNORE))
    model.eval(), reference.eval(), plain.eval()
    with torch.no_grad():
        ours = model(ids, attention_mask, labels)
        whole = plain(ids, attention_mask, labels)
        theirs = reference(input_ids=ids, attention_mask=attention_mask).logits[masked]
    assert ours.logits.shape == theirs.shape == (int(masked.sum()), reference.config.vocab_size)
    torch.testing.assert_close(ours.logits, theirs, rtol=0, atol=1e-5)
    assert torch.equal(ours.labels, ids[masked]) and torch.equal(ours.rows, masked.nonzero()[:, 0])
    assert whole.logits.shape == (3 * 24, reference.config.vocab_size) and torch.equal(whole.labels, labels.flatten())
    torch.testing.assert_close(whole.logits[whole.labels != IGNORE], theirs, rtol=0, atol=1e-5)
    # the gradients of the loss (evaluation mode: no dropout) are the reference's, parameter by parameter
    out = model(ids, attention_mask, labels)
    losses.masked_lm(out.logits, out.labels).mean().backward()
    labels = ids[masked]
    torch.nn.functional.cross_entropy(
        reference(input_ids=ids, attention_mask=attention_mask).logits[masked], labels).backward()
    theirs_grads = dict(reference.named_parameters())
    for name, p in model.mlm.named_parameters():
        if theirs_grads[name].grad is None:
            assert p.grad is None or not p.grad.any(), name
        else:
            torch.testing.assert_close(p.grad, theirs_grads[name].grad, rtol=0, atol=1e-5, msg=name)
    model.zero_grad()
    model.train()
    out = model(ids, attention_mask, torch.where(masked, ids, torch.full_like(ids, IGNORE)))
    losses.masked_lm(out.logits, out.labels).mean().backward()
    last = model.mlm.bert.encoder.layer[-1]
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in last.parameters())
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):  # Accelerate's bf16 mixed precision
        model.eval()
        lower = model(ids, attention_mask, torch.where(masked, ids, torch.full_like(ids, IGNORE))).logits
    assert lower.shape == ours.logits.shape and torch.isfinite(lower).all()


def test_a_masked_lm_batch_with_nothing_masked_gives_no_logits_and_keeps_every_parameter_in_the_graph(tiny_model):
    """A batch where no position is masked (short texts with --line-by-line) gives ``[0, vocabulary]`` logits, and
    every parameter of the last layer still takes part in the graph (DDP waits for a gradient from each); a row with
    nothing masked beside rows with masked positions changes nothing for the others."""
    import copy
    import torch
    from transformers import BertForMaskedLM
    from common.models import cpu
    from common.models.masked_lm import MaskedLM
    from common.train.masking import IGNORE
    from common.train.objectives.mlm import MLMObjective
    reference = BertForMaskedLM.from_pretrained(tiny_model)
    model = cpu.install(MaskedLM(copy.deepcopy(reference), "mean", False))
    ids = torch.randint(5, reference.config.vocab_size, (2, 12))
    attention_mask = torch.ones_like(ids)
    nothing = torch.full_like(ids, IGNORE)
    for mode in (model.train, model.eval):
        mode()
        assert model(ids, attention_mask, nothing).logits.shape == (0, reference.config.vocab_size)
    model.train()
    objective = MLMObjective(argparse.Namespace(nsp=False), None)
    loss, logs = objective.losses(model, {"input_ids": ids, "attention_mask": attention_mask,
                                          "labels": torch.full_like(ids, -100)})
    loss.backward()
    assert logs == {}
    assert float(loss) == 0.0
    assert all(p.grad is not None for p in model.mlm.bert.encoder.layer[-1].parameters())
    one_row = nothing.clone()
    one_row[1, [2, 7]] = ids[1, [2, 7]]
    model.eval(), reference.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(ids, attention_mask, one_row).logits,
                                   reference(input_ids=ids, attention_mask=attention_mask).logits[one_row != IGNORE],
                                   rtol=0, atol=1e-5)


@pytest.mark.parametrize("whole_word", [False, True])
def test_a_batch_is_collated_with_each_example_masked_as_alone_from_its_own_seed(whole_word, tiny_model):
    """``collate`` masks a whole batch at once (``mask_batch``); each row is what ``mask_tokens`` makes of that
    example alone from (seed, epoch or VAL, example), padded with the pad id, labels IGNORE and mask 0 past its end."""
    import numpy as np
    from transformers import AutoTokenizer
    from common.train.masking import IGNORE, Part, mask_tokens
    from common.train.objectives.mlm import VAL, MLMObjective
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    texts = ["the cat sat on the mat", "tokenisation of unbelievably long words", "a", "x y z w v u t s r q p"]
    encoded = tokenizer(texts)["input_ids"]
    ids = np.concatenate(encoded).astype(np.int32)
    starts = np.concatenate([[not tokenizer.convert_ids_to_tokens(int(i)).startswith("##") for i in e]
                             for e in encoded]).astype(np.int8)
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in encoded])]).astype(np.int64)
    args = argparse.Namespace(nsp=False, seed=11, mlm_probability=0.5, mask_replace_prob=0.6,
                              random_replace_prob=0.3, whole_word_mask=whole_word)
    if whole_word:
        args.mask_replace_prob, args.random_replace_prob = 1.0, 0.0
    objective = MLMObjective(args, None)
    objective.tokenizer, objective.special_ids = tokenizer, np.array(tokenizer.all_special_ids)
    objective.parts = [Part(ids, starts, offsets), Part(ids, starts, offsets)]
    objective.set_epoch(3)
    rows = [[2, 0], [0, 1], [3, 0], [1, 0]]
    batch = objective.collate(rows)
    width = max(len(encoded[e]) for e, _ in rows)
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape == (4, width)
    for r, (e, part) in enumerate(rows):
        n = len(encoded[e])
        example, word_start = objective.parts[part].get(e)
        out, labels = mask_tokens(example, np.isin(example, objective.special_ids), word_start,
                                  np.random.default_rng([11, VAL if part else 3, e]), 0.5, args.mask_replace_prob,
                                  args.random_replace_prob, whole_word, tokenizer.mask_token_id, len(tokenizer))
        assert batch["input_ids"][r, :n].tolist() == out.tolist()
        assert batch["labels"][r, :n].tolist() == labels.tolist()
        assert batch["attention_mask"][r].tolist() == [1] * n + [0] * (width - n)
        assert batch["input_ids"][r, n:].tolist() == [tokenizer.pad_token_id] * (width - n)
        assert batch["labels"][r, n:].tolist() == [IGNORE] * (width - n)
    assert (batch["labels"] != IGNORE).any()
