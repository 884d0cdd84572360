"""The llama.cpp build must run on the reference host: AVX, but no AVX2, FMA or F16C."""

from __future__ import annotations

import re


def test_llama_cpp_is_built_for_avx_only_cpus():
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    features = dict(re.findall(r"(\w+) = (\d)", info))
    assert features.get("AVX") == "1", info
    for feature in ("AVX2", "FMA", "F16C", "AVX512", "AMX_INT8", "BMI2"):
        assert features.get(feature, "0") == "0", f"{feature} enabled: would crash on an AVX-only host ({info})"
