#include "diag/frame_walker.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace xalloc {

namespace {

// DWARF register numbers of x86-64.
constexpr uint64_t kRegRbp = 6;
constexpr uint64_t kRegRsp = 7;

// A frame larger than this is taken for a broken rule, not followed.
constexpr uintptr_t kMaxFrameBytes = uintptr_t{64} << 20;

// How to unwind a frame whose code is at a given address: the caller's
// stack pointer (the CFA) is rsp or rbp plus cfa_offset; the return address
// is saved at CFA + ra_offset; the caller's rbp at CFA + rbp_offset, or
// rbp is unchanged (rbp_offset 0). Packed into one word for the cache.
struct FrameRule {
  int32_t cfa_offset;
  int16_t rbp_offset;
  int8_t ra_offset;
  uint8_t flags;
};
constexpr uint8_t kRuleValid = 1;
constexpr uint8_t kCfaFromRbp = 2;
constexpr uint8_t kOutermost = 4;  // the return address is undefined: the walk ends here

uint64_t pack(FrameRule rule) {
  uint64_t word;
  memcpy(&word, &rule, sizeof(word));
  return word;
}

FrameRule unpack(uint64_t word) {
  FrameRule rule;
  memcpy(&rule, &word, sizeof(rule));
  return rule;
}

// --- reading .eh_frame ----------------------------------------------------------

// DW_EH_PE_* pointer encodings: a format in the low nibble, how the value
// applies in the high one.
constexpr uint8_t kPeOmit = 0xff;
constexpr uint8_t kPeIndirect = 0x80;

class Reader {
 public:
  explicit Reader(const uint8_t* at) : at_(at) {}
  const uint8_t* at() const { return at_; }
  void skip(uint64_t bytes) { at_ += bytes; }

  template <typename T>
  T fixed() {
    T value;
    memcpy(&value, at_, sizeof(value));
    at_ += sizeof(value);
    return value;
  }
  uint8_t u8() { return *at_++; }

  uint64_t uleb() {
    uint64_t value = 0;
    for (unsigned shift = 0;; shift += 7) {
      uint8_t byte = *at_++;
      if (shift < 64) value |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) return value;
    }
  }

  int64_t sleb() {
    uint64_t value = 0;
    unsigned shift = 0;
    uint8_t byte;
    do {
      byte = *at_++;
      if (shift < 64) value |= uint64_t{byte & 0x7fu} << shift;
      shift += 7;
    } while (byte & 0x80);
    if (shift < 64 && (byte & 0x40)) value |= ~uint64_t{0} << shift;
    return static_cast<int64_t>(value);
  }

  // A value in `encoding`'s format, not applied to any base.
  bool raw(uint8_t encoding, uint64_t* out) {
    switch (encoding & 0x0f) {
      case 0x00: *out = fixed<uint64_t>(); return true;  // absptr
      case 0x01: *out = uleb(); return true;
      case 0x02: *out = fixed<uint16_t>(); return true;
      case 0x03: *out = fixed<uint32_t>(); return true;
      case 0x04: *out = fixed<uint64_t>(); return true;
      case 0x09: *out = static_cast<uint64_t>(sleb()); return true;
      case 0x0a: *out = static_cast<uint64_t>(int64_t{fixed<int16_t>()}); return true;
      case 0x0b: *out = static_cast<uint64_t>(int64_t{fixed<int32_t>()}); return true;
      case 0x0c: *out = fixed<uint64_t>(); return true;
      default: return false;
    }
  }

  // A pointer in `encoding`; `data_base` is what datarel values are
  // relative to. Text- and function-relative and aligned encodings are not
  // used on x86-64 Linux.
  bool pointer(uint8_t encoding, uintptr_t data_base, uintptr_t* out) {
    if (encoding == kPeOmit) return false;
    auto field = reinterpret_cast<uintptr_t>(at_);
    uint64_t value;
    if (!raw(encoding, &value)) return false;
    switch (encoding & 0x70) {
      case 0x00: break;
      case 0x10: value += field; break;      // pcrel
      case 0x30: value += data_base; break;  // datarel
      default: return false;
    }
    if (encoding & kPeIndirect) memcpy(&value, reinterpret_cast<const void*>(value), sizeof(value));
    *out = value;
    return true;
  }

 private:
  const uint8_t* at_;
};

// A record's length field; false for the zero terminator.
bool record_bounds(Reader& r, const uint8_t** end, bool* wide) {
  uint64_t length = r.fixed<uint32_t>();
  *wide = length == 0xffffffff;
  if (*wide) length = r.fixed<uint64_t>();
  if (length == 0) return false;
  *end = r.at() + length;
  return true;
}

struct Cie {
  const uint8_t* instructions;
  const uint8_t* end;
  uint64_t code_align;
  int64_t data_align;
  uint64_t ra_register;
  uint8_t fde_encoding;
  bool has_augmentation_data;
};

bool parse_cie(const uint8_t* record, Cie* cie) {
  Reader r(record);
  bool wide;
  if (!record_bounds(r, &cie->end, &wide)) return false;
  if ((wide ? r.fixed<uint64_t>() : r.fixed<uint32_t>()) != 0) return false;  // not a CIE
  uint8_t version = r.u8();
  if (version != 1 && version != 3 && version != 4) return false;
  auto augmentation = reinterpret_cast<const char*>(r.at());
  r.skip(strlen(augmentation) + 1);
  if (version == 4 && (r.u8() != 8 || r.u8() != 0)) return false;  // address and segment sizes
  cie->code_align = r.uleb();
  cie->data_align = r.sleb();
  cie->ra_register = version == 1 ? r.u8() : r.uleb();
  cie->fde_encoding = 0;
  cie->has_augmentation_data = augmentation[0] == 'z';
  if (augmentation[0] != '\0' && !cie->has_augmentation_data) return false;
  if (cie->has_augmentation_data) {
    uint64_t length = r.uleb();
    const uint8_t* data_end = r.at() + length;
    for (const char* c = augmentation + 1; *c != '\0'; ++c) {
      if (*c == 'R') {
        cie->fde_encoding = r.u8();
      } else if (*c == 'P') {  // the personality routine's address, which the walk does not need
        uint8_t encoding = r.u8();
        constexpr uint8_t kPeAligned = 0x50;  // padding first: never emitted for x86-64
        uint64_t ignored;
        if ((encoding & 0x70) == kPeAligned || !r.raw(encoding, &ignored)) return false;
      } else if (*c == 'L') {
        r.u8();
      } else {
        return false;  // 'S' (a signal frame: its registers are elsewhere) or unknown
      }
    }
    r = Reader(data_end);
  }
  cie->instructions = r.at();
  return true;
}

struct Fde {
  Cie cie;
  uintptr_t pc_begin;
  uintptr_t pc_end;
  const uint8_t* instructions;
  const uint8_t* end;
};

bool parse_fde(const uint8_t* record, uintptr_t data_base, Fde* fde) {
  Reader r(record);
  bool wide;
  if (!record_bounds(r, &fde->end, &wide)) return false;
  const uint8_t* cie_field = r.at();
  uint64_t cie_offset = wide ? r.fixed<uint64_t>() : r.fixed<uint32_t>();
  if (cie_offset == 0 || !parse_cie(cie_field - cie_offset, &fde->cie)) return false;
  uint64_t range;
  if (!r.pointer(fde->cie.fde_encoding, data_base, &fde->pc_begin) || !r.raw(fde->cie.fde_encoding, &range))
    return false;
  fde->pc_end = fde->pc_begin + range;
  if (fde->cie.has_augmentation_data) r.skip(r.uleb());
  fde->instructions = r.at();
  return true;
}

// The FDE that covers `pc`, through the binary-search table of an object's
// .eh_frame_hdr (as the linker writes it: 4-byte entries relative to the
// header).
const uint8_t* find_fde(const uint8_t* header, uintptr_t pc) {
  constexpr uint8_t kDatarelSdata4 = 0x3b;
  if (header[0] != 1 || header[3] != kDatarelSdata4) return nullptr;
  auto base = reinterpret_cast<uintptr_t>(header);
  Reader r(header + 4);
  uintptr_t eh_frame, count;
  if (!r.pointer(header[1], base, &eh_frame) || !r.pointer(header[2], base, &count) || count == 0) return nullptr;
  const uint8_t* table = r.at();
  auto entry = [&](uintptr_t i, unsigned field) {
    int32_t value;
    memcpy(&value, table + i * 8 + field * 4, sizeof(value));
    return base + static_cast<intptr_t>(value);
  };
  if (pc < entry(0, 0)) return nullptr;
  uintptr_t low = 0, high = count;  // entry(low) <= pc < entry(high)
  while (high - low > 1) {
    uintptr_t mid = low + (high - low) / 2;
    if (entry(mid, 0) <= pc) low = mid;
    else high = mid;
  }
  return reinterpret_cast<const uint8_t*>(entry(low, 1));
}

// --- running the CFI program --------------------------------------------------

// The rules this walker follows for one register.
enum class Saved : uint8_t { kSame, kUndefined, kAtOffset, kUnsupported };

struct RegisterRule {
  Saved how;
  int64_t offset;
};

struct CfiState {
  uint64_t cfa_register;
  int64_t cfa_offset;
  bool cfa_is_expression;
  RegisterRule rbp;
  RegisterRule ra;
};

class CfiMachine {
 public:
  CfiMachine(const Cie& cie, uintptr_t pc) : cie_(cie), pc_(pc) {
    state_ = CfiState{kRegRsp, 0, false, {Saved::kSame, 0}, {Saved::kUndefined, 0}};
  }

  // Runs the CIE's initial instructions (`in_cie`) or the FDE's, from
  // `loc`, up to pc. False on an instruction this walker does not know.
  bool run(const uint8_t* at, const uint8_t* end, uintptr_t loc, bool in_cie) {
    Reader r(at);
    while (r.at() < end) {
      uint64_t advance = 0;
      if (!execute(r, loc, in_cie, &advance)) return false;
      loc += advance;
      if (loc > pc_) return true;
    }
    return true;
  }

  void mark_initial() { initial_ = state_; }
  const CfiState& state() const { return state_; }

 private:
  static constexpr unsigned kStackDepth = 8;

  // One DW_CFA_* instruction; *advance: how far it moves the location.
  bool execute(Reader& r, uintptr_t loc, bool in_cie, uint64_t* advance) {
    uint8_t op = r.u8();
    uint8_t low = op & 0x3f;
    switch (op & 0xc0) {
      case 0x40:  // advance_loc
        *advance = low * cie_.code_align;
        return true;
      case 0x80:  // offset
        set(low, Saved::kAtOffset, factored(r.uleb()));
        return true;
      case 0xc0:  // restore
        restore(low, in_cie);
        return true;
      default:
        break;
    }
    switch (op) {
      case 0x00:  // nop
        return true;
      case 0x01: {  // set_loc
        uintptr_t to;
        if (!r.pointer(cie_.fde_encoding, 0, &to) || to < loc) return false;
        *advance = to - loc;
        return true;
      }
      case 0x02:  // advance_loc1, 2, 4
        *advance = r.u8() * cie_.code_align;
        return true;
      case 0x03:
        *advance = r.fixed<uint16_t>() * cie_.code_align;
        return true;
      case 0x04:
        *advance = r.fixed<uint32_t>() * cie_.code_align;
        return true;
      case 0x05: {  // offset_extended
        uint64_t reg = r.uleb();
        set(reg, Saved::kAtOffset, factored(r.uleb()));
        return true;
      }
      case 0x06:  // restore_extended
        restore(r.uleb(), in_cie);
        return true;
      case 0x07:  // undefined
        set(r.uleb(), Saved::kUndefined, 0);
        return true;
      case 0x08:  // same_value
        set(r.uleb(), Saved::kSame, 0);
        return true;
      case 0x09:    // register: saved in another register
      case 0x14: {  // val_offset: the value, not a place
        uint64_t reg = r.uleb();
        r.uleb();
        set(reg, Saved::kUnsupported, 0);
        return true;
      }
      case 0x0a:  // remember_state
        if (depth_ == kStackDepth) return false;
        stack_[depth_++] = state_;
        return true;
      case 0x0b:  // restore_state
        if (depth_ == 0) return false;
        state_ = stack_[--depth_];
        return true;
      case 0x0c: {  // def_cfa
        uint64_t reg = r.uleb();
        define_cfa(reg, static_cast<int64_t>(r.uleb()));
        return true;
      }
      case 0x0d:  // def_cfa_register
        state_.cfa_register = r.uleb();
        return true;
      case 0x0e:  // def_cfa_offset
        state_.cfa_offset = static_cast<int64_t>(r.uleb());
        return true;
      case 0x0f:  // def_cfa_expression
        r.skip(r.uleb());
        state_.cfa_is_expression = true;
        return true;
      case 0x10:    // expression
      case 0x11: {  // offset_extended_sf
        uint64_t reg = r.uleb();
        set(reg, Saved::kAtOffset, r.sleb() * cie_.data_align);
        return true;
      }
      case 0x12: {  // def_cfa_sf
        uint64_t reg = r.uleb();
        define_cfa(reg, r.sleb() * cie_.data_align);
        return true;
      }
      case 0x13:  // def_cfa_offset_sf
        state_.cfa_offset = r.sleb() * cie_.data_align;
        return true;
      case 0x15: {  // val_offset_sf
        uint64_t reg = r.uleb();
        r.sleb();
        set(reg, Saved::kUnsupported, 0);
        return true;
      }
      case 0x2e:  // GNU_args_size
        r.uleb();
        return true;
      case 0x2f: {  // GNU_negative_offset_extended
        uint64_t reg = r.uleb();
        set(reg, Saved::kAtOffset, -factored(r.uleb()));
        return true;
      }
      default:
        return false;
    }
  }

  int64_t factored(uint64_t offset) const { return static_cast<int64_t>(offset) * cie_.data_align; }
  void define_cfa(uint64_t reg, int64_t offset) {
    state_.cfa_register = reg;
    state_.cfa_offset = offset;
    state_.cfa_is_expression = false;
  }

  RegisterRule* rule_of(uint64_t reg) {
    if (reg == kRegRbp) return &state_.rbp;
    if (reg == cie_.ra_register) return &state_.ra;
    return nullptr;  // a register the walk does not need
  }
  void set(uint64_t reg, Saved how, int64_t offset) {
    if (RegisterRule* rule = rule_of(reg)) *rule = RegisterRule{how, offset};
  }
  void restore(uint64_t reg, bool in_cie) {
    RegisterRule* rule = rule_of(reg);
    if (rule == nullptr) return;
    if (in_cie) *rule = RegisterRule{Saved::kUnsupported, 0};
    else *rule = reg == kRegRbp ? initial_.rbp : initial_.ra;
  }

  const Cie& cie_;
  uintptr_t pc_;
  CfiState state_;
  CfiState initial_{};
  CfiState stack_[kStackDepth];
  unsigned depth_ = 0;
};

// The rule for code at `pc` in the object whose .eh_frame_hdr is `header`;
// kRuleValid clear when there is none this walker can follow.
FrameRule compute_rule(const uint8_t* header, uintptr_t pc) {
  FrameRule none{0, 0, 0, 0};
  const uint8_t* record = find_fde(header, pc);
  Fde fde;
  if (record == nullptr || !parse_fde(record, reinterpret_cast<uintptr_t>(header), &fde) || pc < fde.pc_begin ||
      pc >= fde.pc_end)
    return none;
  CfiMachine machine(fde.cie, pc);
  if (!machine.run(fde.cie.instructions, fde.cie.end, fde.pc_begin, true)) return none;
  machine.mark_initial();
  if (!machine.run(fde.instructions, fde.end, fde.pc_begin, false)) return none;

  const CfiState& s = machine.state();
  if (s.cfa_is_expression || (s.cfa_register != kRegRsp && s.cfa_register != kRegRbp) ||
      s.cfa_offset != static_cast<int32_t>(s.cfa_offset))
    return none;
  FrameRule rule{static_cast<int32_t>(s.cfa_offset), 0, 0,
                 static_cast<uint8_t>(kRuleValid | (s.cfa_register == kRegRbp ? kCfaFromRbp : 0))};
  if (s.ra.how == Saved::kUndefined) {
    rule.flags |= kOutermost;
    return rule;
  }
  if (s.ra.how != Saved::kAtOffset || s.ra.offset >= 0 || s.ra.offset < -128) return none;
  rule.ra_offset = static_cast<int8_t>(s.ra.offset);
  if (s.rbp.how == Saved::kAtOffset) {
    if (s.rbp.offset >= 0 || s.rbp.offset < INT16_MIN) return none;
    rule.rbp_offset = static_cast<int16_t>(s.rbp.offset);
  } else if (s.rbp.how != Saved::kSame) {
    return none;
  }
  return rule;
}

// --- the rule cache -------------------------------------------------------------

// Rules by code address, shared by all threads, written without a lock: a
// slot holds the rule and a check word, rule ^ pc ^ object; a reader that
// sees the two words of different writers (or another pc's) gets a check
// that does not match, and computes the rule again. The object (its
// .eh_frame_hdr) is part of the key so that a library unloaded and
// replaced by another at the same address does not reuse its rules
// (unless the new one's .eh_frame_hdr lands at the very same address).
// 4096 slots: 64 KiB, in zero-initialised memory untouched unless a walk
// runs.
constexpr unsigned kRuleSlotBits = 12;

struct RuleSlot {
  std::atomic<uint64_t> check;
  std::atomic<uint64_t> rule;
};
RuleSlot g_rules[1u << kRuleSlotBits];

RuleSlot& slot_of(uintptr_t pc) {
  return g_rules[(pc * 0x9e3779b97f4a7c15ull) >> (64 - kRuleSlotBits)];
}

FrameRule rule_for(uintptr_t pc) {
  dl_find_object object;
  if (_dl_find_object(reinterpret_cast<void*>(pc), &object) != 0 || object.dlfo_eh_frame == nullptr)
    return FrameRule{0, 0, 0, 0};
  auto header = static_cast<const uint8_t*>(object.dlfo_eh_frame);
  uint64_t key = pc ^ reinterpret_cast<uintptr_t>(header);
  RuleSlot& slot = slot_of(pc);
  uint64_t word = slot.rule.load(std::memory_order_relaxed);
  if ((slot.check.load(std::memory_order_relaxed) ^ word) == key) return unpack(word);
  FrameRule rule = compute_rule(header, pc);
  word = pack(rule);
  slot.check.store(word ^ key, std::memory_order_relaxed);
  slot.rule.store(word, std::memory_order_relaxed);
  return rule;
}

// --- stepping -------------------------------------------------------------------

struct Registers {
  uintptr_t ip;
  uintptr_t sp;
  uintptr_t rbp;
};

// Stack slots of other frames: not the program's objects, which the
// sanitizers watch.
__attribute__((no_sanitize("address", "thread"))) uintptr_t load_word(uintptr_t address) {
  uintptr_t value;
  memcpy(&value, reinterpret_cast<const void*>(address), sizeof(value));
  return value;
}

// Moves `regs` to the caller's frame. Every slot read lies between the
// frame's stack pointer and its CFA, which must be above it and at most
// kMaxFrameBytes away. That bounds what a wrong rule could make the walk
// read; it does not make such a read safe: the walk trusts the objects'
// call-frame information, as C++ exceptions do.
bool step(Registers* regs, FrameRule rule) {
  uintptr_t base = (rule.flags & kCfaFromRbp) != 0 ? regs->rbp : regs->sp;
  uintptr_t cfa = base + static_cast<uintptr_t>(static_cast<intptr_t>(rule.cfa_offset));
  if (cfa <= regs->sp || cfa - regs->sp > kMaxFrameBytes || (cfa & 7) != 0) return false;
  uintptr_t ra_at = cfa + static_cast<uintptr_t>(static_cast<intptr_t>(rule.ra_offset));
  if (ra_at < regs->sp) return false;
  uintptr_t rbp = regs->rbp;
  if (rule.rbp_offset != 0) {
    uintptr_t rbp_at = cfa + static_cast<uintptr_t>(static_cast<intptr_t>(rule.rbp_offset));
    if (rbp_at < regs->sp) return false;
    rbp = load_word(rbp_at);
  }
  *regs = Registers{load_word(ra_at), cfa, rbp};
  return true;
}

}  // namespace

__attribute__((noinline)) FrameWalk frame_walk(void** frames, int max) {
  Registers regs;
  // This function's own state, read at one point: the rule for that point
  // (looked up exactly: it is not a return address) leads to the caller.
  __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
                   : "=r"(regs.ip), "=r"(regs.sp), "=r"(regs.rbp));
  FrameRule own = rule_for(regs.ip);
  if ((own.flags & kRuleValid) == 0 || (own.flags & kOutermost) != 0 || !step(&regs, own))
    return FrameWalk{0, false};
  int depth = 0;
  while (depth < max) {
    if (regs.ip == 0) return FrameWalk{depth, true};
    frames[depth++] = reinterpret_cast<void*>(regs.ip);
    // A return address follows its call: the call's own rule is one byte
    // before it (the next function may start right after a call that does
    // not return).
    FrameRule rule = rule_for(regs.ip - 1);
    if ((rule.flags & kRuleValid) == 0) return FrameWalk{depth, false};
    if ((rule.flags & kOutermost) != 0) return FrameWalk{depth, true};
    if (!step(&regs, rule)) return FrameWalk{depth, false};
  }
  return FrameWalk{depth, true};
}

}  // namespace xalloc
