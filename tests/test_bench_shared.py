"""bench/shared.py's description of the CPU a benchmark ran on, which every table of bench/results.md carries: its
name and the instruction sets the rows depend on, read from /proc/cpuinfo on x86 and on ARM."""

from bench import shared

EPYC_ZEN2 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 49
model name\t: AMD EPYC 7R32
stepping\t: 0
flags\t\t: fpu vme sse sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7R32
flags\t\t: fpu vme sse sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni
"""

GRAVITON2 = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1
"""

VM_WITHOUT_FLAGS = "processor\t: 0\nmodel name\t: Virtual CPU\n"


def test_an_avx2_epyc_is_named_with_its_family_and_model_and_its_missing_avx512():
    assert shared.describe_cpu(EPYC_ZEN2, "x86_64") == (
        "AMD EPYC 7R32 (AuthenticAMD family 23 model 49 stepping 0), x86_64, with avx2, fma, without avx512f, "
        "avx512_vnni, avx_vnni, avx512_bf16, amx_bf16, amx_int8")
    assert shared.cpu_flags(EPYC_ZEN2) == {"fpu", "vme", "sse", "sse2", "ssse3", "fma", "cx16", "sse4_1", "sse4_2",
                                           "avx", "f16c", "avx2", "bmi2", "sha_ni"}


def test_an_arm_cpu_is_named_by_its_part_and_its_features_are_its_flags():
    assert shared.describe_cpu(GRAVITON2, "aarch64") == (
        "Neoverse N1 (implementer 0x41, part 0xd0c), aarch64, with asimd, asimddp, without i8mm, bf16, sve, sve2")
    assert {"asimd", "asimddp", "atomics"} <= shared.cpu_flags(GRAVITON2)


def test_a_cpu_without_flags_or_cpuinfo_says_it_has_none_of_them():
    assert shared.describe_cpu(VM_WITHOUT_FLAGS, "x86_64") == (
        "Virtual CPU, x86_64, with none of avx2, fma, avx512f, avx512_vnni, avx_vnni, avx512_bf16, amx_bf16, amx_int8")
    assert shared.describe_cpu("", "arm64") == (
        "ARM (implementer ?, part ?), arm64, with none of asimd, asimddp, i8mm, bf16, sve, sve2")
    assert shared.cpu_flags("") == set()
