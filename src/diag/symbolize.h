// Names for code addresses, for heap profiles and leak reports.
//
// dladdr() only knows exported symbols, which leaves most functions of an
// executable nameless (and in a statically linked program, every one);
// this reads each object's ELF symbol table (.symtab, else .dynsym) from
// its file instead. Used when profiles are written and for the stack of a
// misuse report when libunwind cannot give it, never on allocation paths.
#pragma once

#include <cstddef>

namespace xalloc {

// Writes "function+0xoffset" (or "object+0xoffset", or the address) for
// `address` into buf; returns buf. `demangled` is not attempted: pprof and
// flame-graph tools demangle themselves.
const char* symbolize(const void* address, char* buf, size_t size);

// True if `address` is inside xalloc's own code (its frames are left out of
// profiles).
bool is_xalloc_code(const void* address);

// True for a function name (or symbolize's "function+0xoffset") of xalloc:
// its namespace, its prefixed API, and the shim's entry points - C++
// operator new and delete and the C functions - which an optimised build
// reaches by tail calls (no frame of their own) but a debug build does not.
// For telling xalloc's frames apart where it shares the executable.
bool is_xalloc_name(const char* name);

// A statically linked program: dladdr knows no object there.
bool is_static_program();

}  // namespace xalloc
