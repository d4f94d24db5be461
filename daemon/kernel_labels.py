"""A kernel as a metric names it: a short readable label (the function's qualified name, without
its return type, template arguments or parameter list, at most MAX_LABEL characters) and a
stable id for the full name. A demangled signature was the label before, cut at 200 characters:
unreadable in a legend, and two instantiations cut alike became one series. The label is for
people and may be shared by several kernels (every `cutlass::device_kernel`); `kernel_id` tells
them apart, is the same in every process and every restart (a hash of the mangled name), and
`gpuobsctl kernels --kernel-id` and the Kernel message resolve it to the full name."""

from __future__ import annotations

import hashlib

MAX_LABEL = 64
KERNEL_ID_HEX = 12  # 48 bits: two of 10,000 distinct kernels share an id with odds of 2e-7
ANONYMOUS = "(anonymous namespace)"


def kernel_id(mangled: str, demangled: str = "") -> str:
    """12 hex digits of BLAKE2b over the mangled name (the demangled one where a table has no
    mangled name): stable across processes, restarts and daemon versions."""
    text = mangled or demangled
    return hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=KERNEL_ID_HEX // 2).hexdigest()


def _operator_char(text: str, index: int) -> bool:
    """The '<' at index is an operator's own (operator<, operator<<), not a template's."""
    return text.endswith("operator", 0, index) or text.endswith("operator<", 0, index)


def _name_part(signature: str) -> str:
    """The signature up to its parameter list: the first '(' outside template arguments (an
    anonymous namespace's parentheses are part of the name). A cut signature (no ')') is fine."""
    depth = 0
    index = 0
    while index < len(signature):
        char = signature[index]
        if signature.startswith(ANONYMOUS, index):
            index += len(ANONYMOUS)
            continue
        if char == "<" and not _operator_char(signature, index):
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif char == "(" and depth == 0:
            if signature.endswith("operator", 0, index):  # operator(): its own parentheses are the name
                index += 2
                continue
            return signature[:index]
        index += 1
    return signature


def _without_templates(name: str) -> str:
    """The name with every <...> removed (nested ones too); "operator<" and the like keep theirs."""
    out: list[str] = []
    depth = 0
    for index, char in enumerate(name):
        if char == "<" and not _operator_char(name, index):
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(char)
    return "".join(out)


def kernel_label(demangled: str) -> str:
    """The short label of a kernel from its demangled name: `void vllm::rms_norm_kernel<c10::BFloat16,
    8>(c10::BFloat16*, ...)` is `vllm::rms_norm_kernel`; an `extern "C"` name (Triton, nvjet) is
    itself. Longer than MAX_LABEL: its innermost qualifiers that fit, else its last MAX_LABEL
    characters. Never empty ("?" for an empty name)."""
    name = _without_templates(_name_part(demangled.strip())).strip()
    # the return type, if any, is what comes before the last space outside the name itself
    name = name.replace(ANONYMOUS + "::", "").replace(ANONYMOUS, "")
    if " " in name and not name.rstrip().endswith("operator"):
        head, _, tail = name.rpartition(" ")
        name = tail or head
    name = name.strip() or demangled.strip()[:MAX_LABEL] or "?"
    if len(name) <= MAX_LABEL:
        return name
    parts = name.split("::")
    while len(parts) > 1 and len("::".join(parts)) > MAX_LABEL:
        parts.pop(0)
    short = "::".join(parts)
    return short if len(short) <= MAX_LABEL else short[-MAX_LABEL:]
