// The kernel filter (`set-mode --kernel REGEX`): a regular expression searched in kernel names,
// inside the served process. Whatever a client sends, it must neither crash nor stall that
// process, so this is a Pike VM: compiled once into a bounded program, searched in time
// O(name length x program size) with memory O(program size), no recursion while searching and
// none deeper than the pattern is long while compiling. (std::regex, used before, backtracks: a
// 40,007-character name overflowed its stack, and `(.+.+)+!` spun a control thread forever.)
//
// Syntax, a subset of ECMAScript regular expressions with the same meaning for a search:
// literals; `.`; escapes `\d \D \w \W \s \S` and `\` before any other punctuation; classes
// `[a-z_]`, `[^...]` (with those escapes inside); anchors `^` `$`; groups `(...)` and `(?:...)`;
// `|`; quantifiers `*` `+` `?` `{n}` `{n,}` `{n,m}`, each optionally lazy (`*?`: the same verdict
// for a search). Refused with a reason: back-references, lookaround, named groups, flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpuobs {

class KernelFilter {
 public:
  static constexpr size_t kMaxPatternBytes = 255;  // the control block's filter field
  static constexpr size_t kMaxProgram = 2048;      // instructions, after repetition is expanded

  // "" and a filter in *out when `pattern` is acceptable; else the reason, and *out unchanged.
  static std::string compile(const std::string& pattern, KernelFilter* out);

  enum class Verdict { NoMatch, Match, TooCostly };
  // Whether the pattern matches anywhere in `text`, spending at most `budget` steps (one per
  // live state per byte): TooCostly beyond, so no name and pattern can hold the caller long.
  Verdict search(const std::string& text, uint64_t budget = UINT64_MAX) const;

 private:
  enum class Op : uint8_t { Char, Any, Class, Split, Jump, Begin, End, Match };
  struct Instruction {
    Op op;
    uint8_t byte;  // Char
    uint32_t x;    // Split: first branch (preferred), Jump: target; Class: index into classes_
    uint32_t y;    // Split: second branch
  };
  std::vector<Instruction> program_;
  std::vector<std::vector<uint64_t>> classes_;  // 256-bit sets, 4 words each

  friend class FilterCompiler;
};

}  // namespace gpuobs
