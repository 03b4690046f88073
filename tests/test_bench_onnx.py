"""bench/all.py's embed-int8 row on any CPU: which of sentence-transformers' dynamic int8 ONNX exports fits a CPU's
flags, and the file that export writes, held against sentence-transformers' own naming where its ONNX backend is
installed (bench/requirements-onnx.txt's folder, bench/out/st-onnx)."""

import os
import sys
import types

import pytest

from bench import all as bench_all
from conftest import ROOT

ST_ONNX = os.path.join(ROOT, "bench", "out", "st-onnx")
CONFIGS = ("avx2", "avx512", "avx512_vnni", "arm64")

# /proc/cpuinfo flags of a 2-core AMD EPYC (Zen 2) with AVX2 and no AVX-512, and of an Intel Xeon with AVX-512
# but no VNNI (Skylake-SP), the parts that decide
EPYC_ZEN2 = {"sse4_2", "avx", "avx2", "fma", "bmi2", "sha_ni"}
XEON_SKYLAKE = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl"}
XEON_CASCADE_LAKE = XEON_SKYLAKE | {"avx512_vnni"}
GRAVITON2 = {"fp", "asimd", "asimddp", "atomics"}


def test_the_export_is_the_widest_the_cpu_has_and_arm64_on_arm():
    assert bench_all.onnx_config(EPYC_ZEN2, "x86_64") == "avx2"
    assert bench_all.onnx_config(EPYC_ZEN2 | {"avx_vnni"}, "x86_64") == "avx2"
    assert bench_all.onnx_config(XEON_SKYLAKE, "x86_64") == "avx512"
    assert bench_all.onnx_config(XEON_CASCADE_LAKE, "x86_64") == "avx512_vnni"
    assert bench_all.onnx_config(GRAVITON2, "aarch64") == "arm64"
    assert bench_all.onnx_config(set(), "arm64") == "arm64"


def test_each_export_is_read_from_the_file_sentence_transformers_names_it():
    assert [bench_all.onnx_int8_file(c) for c in CONFIGS] == [
        "onnx/model_quint8_avx2.onnx", "onnx/model_qint8_avx512.onnx", "onnx/model_qint8_avx512_vnni.onnx",
        "onnx/model_qint8_arm64.onnx"]


def tiny_onnx(path):
    """A valid ONNX model of one Identity node: what the stand-in quantizer writes."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])),
              str(path))


@pytest.mark.parametrize("config", CONFIGS)
def test_the_file_names_are_those_sentence_transformers_export_writes(config, tmp_path, monkeypatch):
    """sentence-transformers' export_dynamic_quantized_onnx_model run as it is, with optimum's own quantization
    configurations; only the ONNX model and the quantizer are stand-ins (the quantizer writes the file under the
    name optimum's ORTQuantizer.quantize gives it: the model's stem, "_", the suffix it is passed)."""
    if not os.path.isdir(os.path.join(ST_ONNX, "optimum", "onnxruntime")):
        pytest.skip(f"no sentence-transformers ONNX backend in {ST_ONNX} (bench/requirements-onnx.txt)")
    pytest.importorskip("onnx")
    monkeypatch.setattr(sys, "path", [*sys.path, ST_ONNX])  # after the project's packages: optimum alone comes from it
    import optimum.onnxruntime
    from sentence_transformers.backend import export_dynamic_quantized_onnx_model

    class Quantizer:
        @classmethod
        def from_pretrained(cls, model):
            return cls()

        def quantize(self, quantization_config, save_dir, file_suffix="quantized"):
            tiny_onnx(os.path.join(save_dir, f"model_{file_suffix}.onnx"))

    class Model(types.SimpleNamespace):
        pass

    # set in the module's namespace: its lazy attributes would import optimum's ONNX models, which need transformers 4
    monkeypatch.setitem(vars(optimum.onnxruntime), "ORTModel", Model)
    monkeypatch.setitem(vars(optimum.onnxruntime), "ORTQuantizer", Quantizer)
    export_dynamic_quantized_onnx_model(types.SimpleNamespace(transformers_model=Model()), config, str(tmp_path))
    written = [os.path.relpath(os.path.join(d, f), tmp_path).replace(os.sep, "/")
               for d, _, files in os.walk(tmp_path) for f in files]
    assert written == [bench_all.onnx_int8_file(config)]
