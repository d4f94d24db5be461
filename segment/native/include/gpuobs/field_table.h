// Field tables: each wire struct's members by name, offset, size and kind, written beside the
// struct (layout.h) and read off it with offsetof and sizeof. The Python module builds its numpy
// dtypes and dicts from them, so Python never holds a second copy of an offset or a field name.
// A table lists every member, reserved ones included, in order: `covers` proves at compile time
// that it accounts for every byte, so a member added to a struct and not to its table (or the
// other way round) does not compile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace gpuobs {

enum class FieldKind : uint8_t {
  Unsigned,  // a little-endian unsigned integer of 1, 2, 4 or 8 bytes
  Text,      // a char array: NUL-terminated text, or `length_offset` says how many bytes are text
  Records,   // an array of `element_count`-field structs described by `element`
  Reserved,  // padding or room kept for later: never exported
};

constexpr uint32_t kNoLengthField = UINT32_MAX;

struct Field {
  const char* name;
  uint32_t offset;
  uint32_t bytes;
  FieldKind kind;
  uint32_t length_offset = kNoLengthField;  // Text: offset of the uint32 member holding its length
  const Field* element = nullptr;           // Records: the element's table
  uint32_t element_fields = 0;              // Records: entries in that table
};

template <class T>
constexpr FieldKind field_kind_of() {
  using Element = std::remove_all_extents_t<T>;
  if constexpr (std::is_array_v<T> && std::is_same_v<Element, char>) {
    return FieldKind::Text;
  } else {
    static_assert(std::is_unsigned_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8),
                  "a field is an unsigned integer or a char array; mark others GPUOBS_RESERVED or GPUOBS_RECORDS");
    return FieldKind::Unsigned;
  }
}

// Records: the size of one element, the sum of its table's fields (covers checks that table).
constexpr uint32_t element_bytes(const Field& field) {
  uint32_t bytes = 0;
  for (uint32_t i = 0; i < field.element_fields; ++i) bytes += field.element[i].bytes;
  return bytes;
}

// True when `fields` lists members back to back from offset 0 to `bytes`, with nothing left out,
// and each array of structs is a whole number of its elements.
template <size_t N>
constexpr bool covers(const Field (&fields)[N], size_t bytes) {
  size_t at = 0;
  for (size_t i = 0; i < N; ++i) {
    if (fields[i].offset != at || fields[i].bytes == 0) return false;
    if (fields[i].kind == FieldKind::Records &&
        (element_bytes(fields[i]) == 0 || fields[i].bytes % element_bytes(fields[i]) != 0))
      return false;
    at += fields[i].bytes;
  }
  return at == bytes;
}

template <size_t N>
constexpr uint32_t field_count(const Field (&)[N]) {
  return uint32_t(N);
}

// A struct's table under the name Python knows the struct by, so that every wire struct is
// exported in one loop.
struct FieldTable {
  const char* name;
  const Field* fields;
  uint32_t count;
  uint32_t bytes;  // sizeof the struct
};

}  // namespace gpuobs

#define GPUOBS_FIELD(S, f) \
  ::gpuobs::Field { #f, uint32_t(offsetof(S, f)), uint32_t(sizeof(S::f)), ::gpuobs::field_kind_of<decltype(S::f)>() }
// Text whose length is held in member `n` (bounded by the array, less its terminating NUL).
#define GPUOBS_TEXT(S, f, n)                                                                                  \
  ::gpuobs::Field {                                                                                           \
    #f, uint32_t(offsetof(S, f)), uint32_t(sizeof(S::f)), ::gpuobs::FieldKind::Text, uint32_t(offsetof(S, n)) \
  }
#define GPUOBS_RECORDS(S, f, table)                                                                               \
  ::gpuobs::Field {                                                                                               \
    #f, uint32_t(offsetof(S, f)), uint32_t(sizeof(S::f)), ::gpuobs::FieldKind::Records, ::gpuobs::kNoLengthField, \
        table, ::gpuobs::field_count(table)                                                                       \
  }
#define GPUOBS_RESERVED(S, f) \
  ::gpuobs::Field { #f, uint32_t(offsetof(S, f)), uint32_t(sizeof(S::f)), ::gpuobs::FieldKind::Reserved }
#define GPUOBS_TABLE(key, S, table) \
  ::gpuobs::FieldTable { key, table, ::gpuobs::field_count(table), uint32_t(sizeof(S)) }
