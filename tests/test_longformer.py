"""04 convert-long's conversion (common/models/longformer.py): a Longformer made from the tiny BERT computes the
original on inputs shorter than half its window, with the positions tiled."""

import torch


def test_a_converted_longformer_equals_the_original_on_inputs_shorter_than_half_the_window(tiny_model):
    from transformers import AutoModel, AutoTokenizer

    from common.models.longformer import convert_to_longformer
    long, tokenizer = convert_to_longformer(str(tiny_model), max_length=256, window=32)
    short = AutoModel.from_pretrained(str(tiny_model)).eval()
    assert long.config.max_position_embeddings == 257 and tokenizer.model_max_length == 256
    enc = AutoTokenizer.from_pretrained(str(tiny_model))(
        ["kaupunki maa joki meri vuori metsä järvi saari tie", "kirja"], padding=True, return_tensors="pt")
    assert enc["input_ids"].shape[1] <= 16
    with torch.no_grad():
        a = short(**enc).last_hidden_state
        b = long.eval()(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    keep = enc["attention_mask"].bool()
    torch.testing.assert_close(b[keep], a[keep], rtol=1e-4, atol=1e-5)
    positions = long.embeddings.position_embeddings.weight
    torch.testing.assert_close(positions[1 + 64], short.embeddings.position_embeddings.weight[0])  # tiled
