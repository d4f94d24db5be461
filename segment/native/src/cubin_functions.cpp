#include "gpuobs/cubin_functions.h"

#include <cstdint>
#include <cstring>

namespace gpuobs {
namespace {

constexpr uint32_t kSectionSymbolTable = 2;  // SHT_SYMTAB
constexpr uint8_t kSymbolFunction = 2;       // STT_FUNC
constexpr size_t kHeaderBytes = 64;          // Elf64_Ehdr
constexpr size_t kSectionBytes = 64;         // Elf64_Shdr
constexpr size_t kSymbolBytes = 24;          // Elf64_Sym
constexpr size_t kMaxNameBytes = 1 << 16;

// Little-endian loads at an offset already checked to lie inside the image.
template <class T>
T load(const uint8_t* bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes + at, sizeof(T));
  return value;
}

bool inside(size_t size, uint64_t offset, uint64_t length) { return offset <= size && length <= size - offset; }

struct Section {
  uint32_t type = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t link = 0;
  uint64_t entry_size = 0;
};

Section section_at(const uint8_t* bytes, uint64_t at) {
  Section section;
  section.type = load<uint32_t>(bytes, at + 4);
  section.offset = load<uint64_t>(bytes, at + 24);
  section.size = load<uint64_t>(bytes, at + 32);
  section.link = load<uint32_t>(bytes, at + 40);
  section.entry_size = load<uint64_t>(bytes, at + 56);
  return section;
}

}  // namespace

std::vector<std::string> cubin_function_names(const void* image, size_t size, std::string* error) {
  std::vector<std::string> names;
  const auto* bytes = static_cast<const uint8_t*>(image);
  if (bytes == nullptr || size < kHeaderBytes ||
      std::memcmp(bytes,
                  "\x7f"
                  "ELF",
                  4) != 0) {
    *error = "not an ELF image";
    return names;
  }
  if (bytes[4] != 2 || bytes[5] != 1) {
    *error = "not a 64-bit little-endian ELF image";
    return names;
  }
  const uint64_t section_table = load<uint64_t>(bytes, 0x28);
  const uint16_t section_entry = load<uint16_t>(bytes, 0x3a);
  const uint16_t sections = load<uint16_t>(bytes, 0x3c);
  if (section_entry < kSectionBytes || !inside(size, section_table, uint64_t(section_entry) * sections)) {
    *error = "section table outside the image";
    return names;
  }
  bool found = false;
  for (uint16_t index = 0; index < sections; ++index) {
    const Section symbols = section_at(bytes, section_table + uint64_t(index) * section_entry);
    if (symbols.type != kSectionSymbolTable) continue;
    found = true;
    if (symbols.link >= sections || symbols.entry_size < kSymbolBytes || !inside(size, symbols.offset, symbols.size)) {
      *error = "symbol table outside the image";
      return {};
    }
    const Section strings = section_at(bytes, section_table + uint64_t(symbols.link) * section_entry);
    if (!inside(size, strings.offset, strings.size)) {
      *error = "string table outside the image";
      return {};
    }
    for (uint64_t at = 0; at + kSymbolBytes <= symbols.size; at += symbols.entry_size) {
      const uint64_t symbol = symbols.offset + at;
      const uint32_t name = load<uint32_t>(bytes, symbol);
      const uint8_t info = bytes[symbol + 4];
      const uint16_t defined_in = load<uint16_t>(bytes, symbol + 6);
      if ((info & 0xf) != kSymbolFunction || defined_in == 0 || name >= strings.size) continue;
      const char* text = reinterpret_cast<const char*>(bytes + strings.offset + name);
      const size_t room = size_t(strings.size - name);
      const size_t length = strnlen(text, room < kMaxNameBytes ? room : kMaxNameBytes);
      if (length == 0 || length == room) continue;  // empty, or not ended inside its table
      names.emplace_back(text, length);
    }
  }
  if (!found) *error = "no symbol table";
  return names;
}

}  // namespace gpuobs
