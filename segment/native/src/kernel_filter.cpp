#include "gpuobs/kernel_filter.h"

#include <cctype>
#include <memory>

namespace gpuobs {
namespace {

// 256-bit byte sets
using ByteSet = std::vector<uint64_t>;
ByteSet empty_set() { return ByteSet(4, 0); }
void set_byte(ByteSet& set, unsigned byte) { set[byte >> 6] |= 1ULL << (byte & 63); }
bool has_byte(const ByteSet& set, unsigned byte) { return (set[byte >> 6] >> (byte & 63)) & 1; }
void set_range(ByteSet& set, unsigned low, unsigned high) {
  for (unsigned byte = low; byte <= high; ++byte) set_byte(set, byte);
}
void invert(ByteSet& set) {
  for (uint64_t& word : set) word = ~word;
}

// \d \w \s and their complements, as byte sets (ASCII: kernel names are ASCII)
bool class_escape(char letter, ByteSet* out) {
  ByteSet set = empty_set();
  switch (std::tolower(static_cast<unsigned char>(letter))) {
    case 'd':
      set_range(set, '0', '9');
      break;
    case 'w':
      set_range(set, '0', '9');
      set_range(set, 'a', 'z');
      set_range(set, 'A', 'Z');
      set_byte(set, '_');
      break;
    case 's':
      for (unsigned byte : {' ', '\t', '\n', '\v', '\f', '\r'}) set_byte(set, byte);
      break;
    default:
      return false;
  }
  if (std::isupper(static_cast<unsigned char>(letter))) invert(set);
  *out = set;
  return true;
}

bool control_escape(char letter, unsigned* byte) {
  switch (letter) {
    case 'n':
      *byte = '\n';
      return true;
    case 't':
      *byte = '\t';
      return true;
    case 'r':
      *byte = '\r';
      return true;
    case 'f':
      *byte = '\f';
      return true;
    case 'v':
      *byte = '\v';
      return true;
    default:
      return false;
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

struct Node {
  enum Kind { Empty, Byte, Any, Set, Begin, End, Concat, Alternate, Repeat } kind;
  unsigned byte = 0;
  ByteSet set;
  std::vector<std::unique_ptr<Node>> children;
  int min = 0, max = 0;  // Repeat; max < 0: no bound
};

}  // namespace

// Recursive descent over the pattern (depth bounded by its 255 bytes), then code for a Pike VM.
class FilterCompiler {
 public:
  explicit FilterCompiler(const std::string& pattern) : text_(pattern) {}

  std::string compile(KernelFilter* out) {
    std::unique_ptr<Node> tree = alternation();
    if (error_.empty() && at_ < text_.size()) error_ = "unmatched ) at offset " + std::to_string(at_);
    if (!error_.empty()) return error_;
    KernelFilter filter;
    program_ = &filter.program_;
    classes_ = &filter.classes_;
    emit(*tree);
    add({KernelFilter::Op::Match, 0, 0, 0});
    if (!error_.empty()) return error_;
    *out = std::move(filter);
    return "";
  }

 private:
  using Op = KernelFilter::Op;

  bool more() const { return at_ < text_.size(); }
  char peek() const { return text_[at_]; }
  void fail(const std::string& why) {
    if (error_.empty()) error_ = why + " at offset " + std::to_string(at_);
  }

  std::unique_ptr<Node> alternation() {
    auto node = std::make_unique<Node>();
    node->kind = Node::Alternate;
    node->children.push_back(concatenation());
    while (error_.empty() && more() && peek() == '|') {
      ++at_;
      node->children.push_back(concatenation());
    }
    return node->children.size() == 1 ? std::move(node->children[0]) : std::move(node);
  }

  std::unique_ptr<Node> concatenation() {
    auto node = std::make_unique<Node>();
    node->kind = Node::Concat;
    while (error_.empty() && more() && peek() != '|' && peek() != ')') node->children.push_back(repetition());
    return node;
  }

  // {n}, {n,}, {n,m} at at_; false (at_ unchanged) when what follows is not one
  bool braces(int* min, int* max) {
    size_t at = at_ + 1;
    auto number = [&](int* value) {
      size_t start = at;
      long parsed = 0;
      while (at < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at])) && at - start < 5)
        parsed = parsed * 10 + (text_[at++] - '0');
      *value = int(parsed);
      return at > start;
    };
    if (!number(min)) return false;
    *max = *min;
    if (at < text_.size() && text_[at] == ',') {
      ++at;
      if (!number(max)) *max = -1;
    }
    if (at >= text_.size() || text_[at] != '}') return false;
    at_ = at + 1;
    return true;
  }

  std::unique_ptr<Node> repetition() {
    std::unique_ptr<Node> node = atom();
    if (!error_.empty() || !more()) return node;
    int min = 0, max = 0;
    const char c = peek();
    if (c == '*') {
      min = 0;
      max = -1;
      ++at_;
    } else if (c == '+') {
      min = 1;
      max = -1;
      ++at_;
    } else if (c == '?') {
      min = 0;
      max = 1;
      ++at_;
    } else if (c != '{' || !braces(&min, &max)) return node;
    if (max >= 0 && max < min) {
      fail("a quantifier's maximum below its minimum");
      return node;
    }
    if (node->kind == Node::Begin || node->kind == Node::End) {
      fail("nothing to repeat");
      return node;
    }
    if (more() && peek() == '?') ++at_;  // lazy: the same verdict for a search
    if (more() && (peek() == '*' || peek() == '+' || peek() == '?' || (peek() == '{' && braces(&min, &min)))) {
      fail("nothing to repeat (a quantifier after a quantifier)");
      return node;
    }
    auto repeat = std::make_unique<Node>();
    repeat->kind = Node::Repeat;
    repeat->min = min;
    repeat->max = max;
    repeat->children.push_back(std::move(node));
    return repeat;
  }

  std::unique_ptr<Node> leaf(Node::Kind kind) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    return node;
  }

  std::unique_ptr<Node> atom() {
    const char c = text_[at_++];
    switch (c) {
      case '(': {
        if (more() && peek() == '?') {
          if (at_ + 1 < text_.size() && text_[at_ + 1] == ':') {
            at_ += 2;
          } else {
            fail("lookaround and named groups are not supported in a kernel filter");
            return leaf(Node::Empty);
          }
        }
        std::unique_ptr<Node> inner = alternation();
        if (!more() || peek() != ')') {
          fail("missing )");
          return leaf(Node::Empty);
        }
        ++at_;
        return inner;
      }
      case '*':
      case '+':
      case '?':
        --at_;
        fail("nothing to repeat");
        return leaf(Node::Empty);
      case '.': {
        auto node = leaf(Node::Set);
        node->set = empty_set();
        set_byte(node->set, '\n');
        set_byte(node->set, '\r');
        invert(node->set);
        return node;
      }
      case '^':
        return leaf(Node::Begin);
      case '$':
        return leaf(Node::End);
      case '[':
        return bracket();
      case '\\':
        return escape();
      default: {
        auto node = leaf(Node::Byte);
        node->byte = static_cast<unsigned char>(c);
        return node;
      }
    }
  }

  // After a backslash: a class escape, a control or hex escape, or escaped punctuation.
  std::unique_ptr<Node> escape() {
    if (!more()) {
      fail("a pattern may not end with \\");
      return leaf(Node::Empty);
    }
    const char c = text_[at_++];
    ByteSet set;
    if (class_escape(c, &set)) {
      auto node = leaf(Node::Set);
      node->set = set;
      return node;
    }
    unsigned byte = 0;
    if (!escaped_byte(c, &byte)) return leaf(Node::Empty);
    auto node = leaf(Node::Byte);
    node->byte = byte;
    return node;
  }

  // The byte an escape stands for (not a class escape); false with error_ set otherwise.
  bool escaped_byte(char c, unsigned* byte) {
    if (control_escape(c, byte)) return true;
    if (c == 'x') {
      const int high = at_ < text_.size() ? hex_value(text_[at_]) : -1;
      const int low = at_ + 1 < text_.size() ? hex_value(text_[at_ + 1]) : -1;
      if (high < 0 || low < 0) {
        fail("\\x needs two hex digits");
        return false;
      }
      at_ += 2;
      *byte = unsigned(high * 16 + low);
      return true;
    }
    if (std::isalnum(static_cast<unsigned char>(c))) {
      fail(std::string("\\") + c +
           " (back-references, word boundaries, other escapes) is not supported in a kernel filter");
      return false;
    }
    *byte = static_cast<unsigned char>(c);
    return true;
  }

  // One member of a class after its first character `c` was read: a byte (into *byte), or a
  // class escape like \d (into *set, returning Member::Set). Member::Failed once error_ is set.
  enum class Member { Byte, Set, Failed };
  Member class_member(char c, unsigned* byte, ByteSet* set) {
    *byte = static_cast<unsigned char>(c);
    if (c != '\\') return Member::Byte;
    if (!more()) {
      fail("missing ]");
      return Member::Failed;
    }
    const char e = text_[at_++];
    if (class_escape(e, set)) return Member::Set;
    return escaped_byte(e, byte) ? Member::Byte : Member::Failed;
  }

  std::unique_ptr<Node> bracket() {
    auto node = leaf(Node::Set);
    node->set = empty_set();
    bool negated = false;
    if (more() && peek() == '^') {
      negated = true;
      ++at_;
    }
    if (more() && peek() == ']') {
      fail("a class may not start with ] (write \\])");
      return node;
    }
    while (error_.empty()) {
      if (!more()) {
        fail("missing ]");
        return node;
      }
      char c = text_[at_++];
      if (c == ']') break;
      unsigned low = 0;
      ByteSet set;
      const Member first = class_member(c, &low, &set);
      if (first == Member::Failed) return node;
      if (first == Member::Set) {
        for (size_t word = 0; word < 4; ++word) node->set[word] |= set[word];
        continue;
      }
      unsigned high = low;
      if (at_ + 1 < text_.size() && peek() == '-' && text_[at_ + 1] != ']') {
        ++at_;
        const Member last = class_member(text_[at_++], &high, &set);
        if (last == Member::Failed) return node;
        if (last == Member::Set) {
          fail("a range may not end in a class escape");
          return node;
        }
        if (high < low) {
          fail("a range out of order");
          return node;
        }
      }
      set_range(node->set, low, high);
    }
    if (negated) invert(node->set);
    return node;
  }

  // -- code ------------------------------------------------------------------------------
  uint32_t add(KernelFilter::Instruction instruction) {
    if (program_->size() >= KernelFilter::kMaxProgram) {
      if (error_.empty()) error_ = "pattern too large once its repetitions are written out";
      return 0;
    }
    program_->push_back(instruction);
    return uint32_t(program_->size() - 1);
  }

  void emit(const Node& node) {
    if (!error_.empty()) return;
    switch (node.kind) {
      case Node::Empty:
        return;
      case Node::Byte:
        add({Op::Char, uint8_t(node.byte), 0, 0});
        return;
      case Node::Any:
        add({Op::Any, 0, 0, 0});
        return;
      case Node::Set:
        classes_->push_back(node.set);
        add({Op::Class, 0, uint32_t(classes_->size() - 1), 0});
        return;
      case Node::Begin:
        add({Op::Begin, 0, 0, 0});
        return;
      case Node::End:
        add({Op::End, 0, 0, 0});
        return;
      case Node::Concat:
        for (const auto& child : node.children) emit(*child);
        return;
      case Node::Alternate: {
        std::vector<uint32_t> jumps;
        for (size_t index = 0; index < node.children.size(); ++index) {
          const bool last = index + 1 == node.children.size();
          const uint32_t split = last ? 0 : add({Op::Split, 0, 0, 0});
          if (!last) (*program_)[split].x = uint32_t(program_->size());
          emit(*node.children[index]);
          if (!last) {
            jumps.push_back(add({Op::Jump, 0, 0, 0}));
            (*program_)[split].y = uint32_t(program_->size());
          }
          if (!error_.empty()) return;
        }
        for (uint32_t jump : jumps) (*program_)[jump].x = uint32_t(program_->size());
        return;
      }
      case Node::Repeat: {
        const Node& child = *node.children[0];
        for (int copy = 0; copy < node.min && error_.empty(); ++copy) emit(child);
        if (node.max < 0) {  // then as many more as wanted: L: split(body, out); body; jump L
          const uint32_t loop = add({Op::Split, 0, 0, 0});
          (*program_)[loop].x = uint32_t(program_->size());
          emit(child);
          add({Op::Jump, 0, loop, 0});
          (*program_)[loop].y = uint32_t(program_->size());
          return;
        }
        std::vector<uint32_t> splits;  // each optional copy may end the repetition
        for (int copy = node.min; copy < node.max && error_.empty(); ++copy) {
          const uint32_t split = add({Op::Split, 0, 0, 0});
          (*program_)[split].x = uint32_t(program_->size());
          splits.push_back(split);
          emit(child);
        }
        for (uint32_t split : splits) (*program_)[split].y = uint32_t(program_->size());
        return;
      }
    }
  }

  const std::string& text_;
  size_t at_ = 0;
  std::string error_;
  std::vector<KernelFilter::Instruction>* program_ = nullptr;
  std::vector<ByteSet>* classes_ = nullptr;
};

std::string KernelFilter::compile(const std::string& pattern, KernelFilter* out) {
  if (pattern.size() > kMaxPatternBytes)
    return "kernel filter longer than " + std::to_string(kMaxPatternBytes) + " bytes";
  for (char c : pattern)
    if (c == '\0') return "kernel filter contains a NUL byte";
  return FilterCompiler(pattern).compile(out);
}

namespace {

// A set of program counters with O(1) insert, membership and clear (Briggs-Torczon).
class SparseSet {
 public:
  explicit SparseSet(size_t capacity) : dense_(capacity), sparse_(capacity) {}
  bool contains(uint32_t value) const { return sparse_[value] < size_ && dense_[sparse_[value]] == value; }
  void insert(uint32_t value) {
    sparse_[value] = uint32_t(size_);
    dense_[size_++] = value;
  }
  void clear() { size_ = 0; }
  size_t size() const { return size_; }
  uint32_t operator[](size_t index) const { return dense_[index]; }

 private:
  std::vector<uint32_t> dense_, sparse_;
  size_t size_ = 0;
};

}  // namespace

KernelFilter::Verdict KernelFilter::search(const std::string& text, uint64_t budget) const {
  if (program_.empty()) return Verdict::Match;
  const size_t size = program_.size();
  SparseSet current(size), next(size);
  std::vector<uint32_t> stack;
  stack.reserve(size);
  // Every instruction reachable from `start` without consuming a byte, into `list` (each once:
  // loops that match nothing cannot spin). True when one of them is Match.
  auto close = [&](SparseSet& list, uint32_t start, size_t at) {
    stack.clear();
    if (!list.contains(start)) {
      list.insert(start);
      stack.push_back(start);
    }
    while (!stack.empty()) {
      const uint32_t pc = stack.back();
      stack.pop_back();
      const Instruction& in = program_[pc];
      uint32_t follow[2];
      int follows = 0;
      switch (in.op) {
        case Op::Match:
          return true;
        case Op::Jump:
          follow[follows++] = in.x;
          break;
        case Op::Split:
          follow[follows++] = in.x;
          follow[follows++] = in.y;
          break;
        case Op::Begin:
          if (at == 0) follow[follows++] = pc + 1;
          break;
        case Op::End:
          if (at == text.size()) follow[follows++] = pc + 1;
          break;
        default:
          break;  // consumes a byte: waits in the list for the next step
      }
      for (int index = 0; index < follows; ++index) {
        if (!list.contains(follow[index])) {
          list.insert(follow[index]);
          stack.push_back(follow[index]);
        }
      }
    }
    return false;
  };
  for (size_t at = 0;; ++at) {
    if (close(current, 0, at)) return Verdict::Match;  // a match may start at every position
    if (at == text.size()) return Verdict::NoMatch;
    if (current.size() > budget) return Verdict::TooCostly;
    budget -= current.size();
    const unsigned byte = static_cast<unsigned char>(text[at]);
    next.clear();
    for (size_t index = 0; index < current.size(); ++index) {
      const uint32_t pc = current[index];
      const Instruction& in = program_[pc];
      bool advance = false;
      if (in.op == Op::Char) advance = in.byte == byte;
      else if (in.op == Op::Any) advance = true;
      else if (in.op == Op::Class) advance = has_byte(classes_[in.x], byte);
      if (advance && close(next, pc + 1, at + 1)) return Verdict::Match;
    }
    std::swap(current, next);
  }
}

}  // namespace gpuobs
