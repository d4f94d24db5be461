"""The functions a module's cubin defines, read as the injector reads them when it patches the
module (GPUOBS_MEMORY_KERNELS decides per module by them), and what it does with bytes that are
no cubin: an error, never a read outside them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from gpuobs import _native
from gpuobs_testing.cubins import build_cubin

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "two_modules_kernels.cu"
CACHE_KERNEL = "_Z30reshape_and_cache_flash_kernelIfEvPKT_PS0_i"


@pytest.fixture(scope="module")
def cubin(tmp_path_factory) -> bytes:
    return build_cubin(FIXTURE, tmp_path_factory.mktemp("cubin")).read_bytes()


def test_the_functions_of_a_cubin_are_its_kernels(cubin: bytes) -> None:
    names = _native.cubin_function_names(cubin)
    assert sorted(names) == sorted(["_Z17plain_copy_kernelPKfPf", CACHE_KERNEL])


@pytest.mark.parametrize(
    "pattern, chosen",
    [
        ("reshape_and_cache", True),  # a demangled or mangled name: the module is chosen
        ("^void reshape_and_cache_flash_kernel<float>", True),  # the demangled name, anchored
        ("plain_copy_kernel", True),
        ("flash_fwd|nvjet", False),
        ("^reshape", False),  # neither name starts so
    ],
)
def test_a_module_is_chosen_when_one_of_its_kernels_matches(cubin: bytes, pattern: str, chosen: bool) -> None:
    assert _native.module_chosen_for_access_hooks(pattern, _native.cubin_function_names(cubin)) is chosen


def test_bytes_that_are_no_cubin_are_refused_with_a_reason(cubin: bytes) -> None:
    for image, reason in [
        (b"", "not an ELF"),
        (b"\x7fELF" + bytes(60), "not a 64-bit"),
        (b"%PDF-1.4" + bytes(100), "not an ELF"),
    ]:
        with pytest.raises(ValueError, match=reason):
            _native.cubin_function_names(image)
    header = bytearray(cubin[:64])
    header[0x28:0x30] = (len(cubin) * 4).to_bytes(8, "little")  # the section table past the end
    with pytest.raises(ValueError, match="section table outside"):
        _native.cubin_function_names(bytes(header) + cubin[64:])


def test_damaged_cubins_never_read_outside_their_bytes(cubin: bytes) -> None:
    """Cut short or with bytes flipped anywhere (5,000 variants): a list or an error, never a
    crash (the injector reads these inside the served process)."""
    rng = random.Random(7)
    for trial in range(5000):
        image = bytearray(cubin[: rng.randrange(len(cubin) + 1)] if trial % 2 else cubin)
        for _ in range(rng.randrange(1, 16)):
            if image:
                image[rng.randrange(len(image))] = rng.randrange(256)
        try:
            names = _native.cubin_function_names(bytes(image))
        except ValueError:
            continue
        assert all(isinstance(name, str) and name for name in names)
