// The functions a module's cubin defines, read from its ELF symbol table: what the injector
// knows of a module's kernels when it patches the module (MODULE_LOADED comes before its
// functions are handed over, and no driver call is made inside that callback). A bounds-checked
// reader of untrusted bytes: a malformed image yields an error, never a read outside it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gpuobs {

// The names (mangled, as the linker has them) of the functions the ELF image defines; an empty
// list and the reason in *error when the bytes are not a 64-bit little-endian ELF image with a
// symbol table. Never throws.
std::vector<std::string> cubin_function_names(const void* image, size_t size, std::string* error);

}  // namespace gpuobs
