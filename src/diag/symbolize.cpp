#include "diag/symbolize.h"

#include <dlfcn.h>
#include <elf.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "platform/os.h"
#include "support/report.h"

namespace xalloc {

namespace {

// One mapped ELF file and its symbol table.
struct SymbolFile {
  const void* base;  // load address (dli_fbase)
  const char* data;  // the file, mapped
  size_t size;
  const Elf64_Sym* symbols;
  size_t count;
  const char* strings;
  bool relative;  // ET_DYN: symbol values are offsets from the load address
};

constexpr int kMaxFiles = 64;
SymbolFile g_files[kMaxFiles];
int g_file_count = 0;

bool load_symbols(SymbolFile& file, const char* path) {
  size_t size = 0;
  const void* map = os::map_file(path, &size);
  if (map == nullptr) return false;
  file.data = static_cast<const char*>(map);
  file.size = size;
  if (size <= sizeof(Elf64_Ehdr)) return false;
  auto* ehdr = reinterpret_cast<const Elf64_Ehdr*>(file.data);
  if (memcmp(ehdr->e_ident, ELFMAG, SELFMAG) != 0 || ehdr->e_shoff == 0 ||
      ehdr->e_shoff + size_t{ehdr->e_shnum} * sizeof(Elf64_Shdr) > file.size)
    return false;
  file.relative = ehdr->e_type == ET_DYN;
  auto* sections = reinterpret_cast<const Elf64_Shdr*>(file.data + ehdr->e_shoff);
  for (uint32_t wanted : {uint32_t{SHT_SYMTAB}, uint32_t{SHT_DYNSYM}}) {
    for (int i = 0; i < ehdr->e_shnum; ++i) {
      const Elf64_Shdr& sh = sections[i];
      if (sh.sh_type != wanted || sh.sh_link >= ehdr->e_shnum) continue;
      const Elf64_Shdr& strtab = sections[sh.sh_link];
      if (sh.sh_offset + sh.sh_size > file.size || strtab.sh_offset + strtab.sh_size > file.size) continue;
      file.symbols = reinterpret_cast<const Elf64_Sym*>(file.data + sh.sh_offset);
      file.count = sh.sh_size / sizeof(Elf64_Sym);
      file.strings = file.data + strtab.sh_offset;
      return true;
    }
  }
  return false;
}

const SymbolFile* file_for(const Dl_info& info) {
  for (int i = 0; i < g_file_count; ++i) {
    if (g_files[i].base == info.dli_fbase) return g_files[i].symbols != nullptr ? &g_files[i] : nullptr;
  }
  if (g_file_count == kMaxFiles) return nullptr;
  SymbolFile& file = g_files[g_file_count++];
  file = SymbolFile{};
  file.base = info.dli_fbase;
  const char* path = info.dli_fname;
  // The main program's dli_fname may be empty or relative.
  char exe[512];
  if (path == nullptr || path[0] != '/') {
    if (os::executable_path(exe, sizeof(exe))) path = exe;
  }
  if (path == nullptr || !load_symbols(file, path)) {
    file.symbols = nullptr;
    return nullptr;
  }
  return &file;
}

const char* base_name(const char* path) {
  if (path == nullptr) return "?";
  const char* slash = strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

// A statically linked program, where dladdr knows no object: the
// executable's load bias (zero unless it is a static PIE), from where the
// auxiliary vector says its program headers are - against their address
// in the file (PT_PHDR), or else against the ELF header, which the first
// segment maps just before them. file_for reads /proc/self/exe for it.
bool static_executable_info(Dl_info& info) {
  size_t count = 0;
  auto phdrs_at = reinterpret_cast<uintptr_t>(os::program_headers(&count));
  if (phdrs_at == 0) return false;
  auto* phdrs = reinterpret_cast<const Elf64_Phdr*>(phdrs_at);
  const Elf64_Phdr* first_load = nullptr;
  uintptr_t bias = 0;
  bool known = false;
  for (size_t i = 0; i < count; ++i) {
    if (phdrs[i].p_type == PT_PHDR) {
      bias = phdrs_at - phdrs[i].p_vaddr;
      known = true;
    }
    if (phdrs[i].p_type == PT_LOAD && phdrs[i].p_offset == 0 && first_load == nullptr) first_load = &phdrs[i];
  }
  if (!known && first_load != nullptr) {
    auto* ehdr = reinterpret_cast<const Elf64_Ehdr*>(phdrs_at - sizeof(Elf64_Ehdr));
    if (memcmp(ehdr->e_ident, ELFMAG, SELFMAG) == 0 && ehdr->e_phoff == sizeof(Elf64_Ehdr)) {
      bias = reinterpret_cast<uintptr_t>(ehdr) - first_load->p_vaddr;
    }
  }
  info = Dl_info{};
  info.dli_fbase = reinterpret_cast<void*>(bias);
  return true;
}

const char* format_address(const void* address, char* buf, size_t size) {
  const report::Arg args[] = {address};
  report::format(buf, size, "%p", args, 1);
  return buf;
}

}  // namespace

const char* symbolize(const void* address, char* buf, size_t size) {
  Dl_info info;
  bool found = dladdr(address, &info) != 0;
  if (!found && !static_executable_info(info)) return format_address(address, buf, size);
  auto target = reinterpret_cast<uintptr_t>(address);
  if (const SymbolFile* file = file_for(info)) {
    uintptr_t bias = file->relative ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0;
    const Elf64_Sym* best = nullptr;
    for (size_t i = 0; i < file->count; ++i) {
      const Elf64_Sym& sym = file->symbols[i];
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_value == 0) continue;
      uintptr_t start = bias + sym.st_value;
      if (target >= start && target < start + (sym.st_size != 0 ? sym.st_size : 1)) {
        best = &sym;
        break;
      }
    }
    if (best != nullptr) {
      const report::Arg args[] = {file->strings + best->st_name, target - (bias + best->st_value)};
      report::format(buf, size, "%s+%x", args, 2);
      return buf;
    }
  }
  if (!found) return format_address(address, buf, size);
  if (info.dli_sname != nullptr) {
    const report::Arg args[] = {info.dli_sname, target - reinterpret_cast<uintptr_t>(info.dli_saddr)};
    report::format(buf, size, "%s+%x", args, 2);
    return buf;
  }
  const report::Arg args[] = {base_name(info.dli_fname), target - reinterpret_cast<uintptr_t>(info.dli_fbase)};
  report::format(buf, size, "%s+%x", args, 2);
  return buf;
}

bool is_xalloc_name(const char* name) {
  if (strncmp(name, "_ZN6xalloc", 10) == 0 || strncmp(name, "xalloc_", 7) == 0) return true;
  for (const char* prefix : {"_Znw", "_Zna", "_Zdl", "_Zda"}) {
    if (strncmp(name, prefix, 4) == 0) return true;
  }
  static constexpr const char* kEntryPoints[] = {
      "malloc",          "free",          "calloc",         "realloc",          "reallocarray",
      "posix_memalign",  "aligned_alloc", "memalign",       "valloc",           "pvalloc",
      "malloc_usable_size", "free_sized", "free_aligned_sized", "cfree",       "__libc_malloc",
      "__libc_free",     "__libc_calloc", "__libc_realloc", "__libc_memalign",  "__libc_valloc",
      "__libc_pvalloc",  "__posix_memalign"};
  const char* plus = strchr(name, '+');
  size_t length = plus != nullptr ? static_cast<size_t>(plus - name) : strlen(name);
  for (const char* entry : kEntryPoints) {
    if (strlen(entry) == length && strncmp(name, entry, length) == 0) return true;
  }
  return false;
}

bool is_static_program() {
  Dl_info info;
  return dladdr(reinterpret_cast<const void*>(&is_static_program), &info) == 0;
}

bool is_xalloc_code(const void* address) {
  // In a statically linked program dladdr knows nothing: decide by name.
  if (!is_static_program()) {
    Dl_info own;
    Dl_info info;
    if (dladdr(address, &info) == 0) return false;
    dladdr(reinterpret_cast<const void*>(&is_xalloc_code), &own);
    // Linked into the executable, xalloc shares it: decide by name too.
    if (own.dli_fname != nullptr && strstr(own.dli_fname, "libxalloc") != nullptr) {
      return info.dli_fbase == own.dli_fbase;
    }
  }
  char name[256];
  symbolize(address, name, sizeof(name));
  return is_xalloc_name(name);
}

}  // namespace xalloc
