// A loaded library's calls into another, pointed at a function of ours.
// A part of hook.cpp's one translation unit: included there, in order, after the includes.
#pragma once

namespace {

// ---- Calls out of a loaded library, redirected -----------------------------------------
//
// A shared library calls a function of another through a slot of its global offset table
// (a JUMP_SLOT relocation, or GLOB_DAT where it was built without a PLT), which the
// dynamic linker filled at load. Pointing that slot elsewhere redirects that library's
// calls, and only its own: memray intercepts allocators the same way. Used for
// PyTorch/XLA (xla_quiet.h), whose executor has no hook of its own. Linux, x86-64 and
// AArch64; elsewhere nothing is redirected.

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
#if defined(__x86_64__)
constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT, kGlobalData = R_X86_64_GLOB_DAT;
#else
constexpr uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT, kGlobalData = R_AARCH64_GLOB_DAT;
#endif

struct Redirect {
  const char* library;  // a part of its path
  const char* symbol;   // the mangled name it calls
  void* replacement;
  void** original;  // what its first slot held: set before any slot is pointed elsewhere
};

// Point one slot at `replacement`: a slot in the read-only-after-relocation part is made
// writable for the write only.
void PointSlot(const dl_phdr_info* info, void** slot, void* replacement) {
  uintptr_t page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  auto page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(slot) & ~(page_size - 1));
  bool relro = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& header = info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + header.p_vaddr;
    if (header.p_type == PT_GNU_RELRO && reinterpret_cast<uintptr_t>(slot) >= start &&
        reinterpret_cast<uintptr_t>(slot) < start + header.p_memsz) {
      relro = true;
    }
  }
  if (relro && mprotect(page, page_size, PROT_READ | PROT_WRITE) != 0) return;
  __atomic_store_n(slot, replacement, __ATOMIC_SEQ_CST);  // another thread may be calling through it
  if (relro) mprotect(page, page_size, PROT_READ);
}

int RedirectIn(dl_phdr_info* info, size_t, void* data) {
  auto* redirect = static_cast<Redirect*>(data);
  if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, redirect->library) == nullptr) return 0;
  const ElfW(Dyn)* dynamic = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
      dynamic = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    }
  }
  if (dynamic == nullptr) return 0;
  // The dynamic linker has relocated these addresses in place on Linux (glibc); an
  // address below the library's base is still an offset.
  auto at = [&](ElfW(Addr) address) { return address >= info->dlpi_addr ? address : info->dlpi_addr + address; };
  const ElfW(Sym)* symbols = nullptr;
  const char* names = nullptr;
  const ElfW(Rela)* tables[2] = {nullptr, nullptr};
  size_t sizes[2] = {0, 0};
  for (const ElfW(Dyn)* entry = dynamic; entry->d_tag != DT_NULL; ++entry) {
    switch (entry->d_tag) {
      case DT_SYMTAB: symbols = reinterpret_cast<const ElfW(Sym)*>(at(entry->d_un.d_ptr)); break;
      case DT_STRTAB: names = reinterpret_cast<const char*>(at(entry->d_un.d_ptr)); break;
      case DT_JMPREL: tables[0] = reinterpret_cast<const ElfW(Rela)*>(at(entry->d_un.d_ptr)); break;
      case DT_PLTRELSZ: sizes[0] = entry->d_un.d_val; break;
      case DT_RELA: tables[1] = reinterpret_cast<const ElfW(Rela)*>(at(entry->d_un.d_ptr)); break;
      case DT_RELASZ: sizes[1] = entry->d_un.d_val; break;
      default: break;
    }
  }
  if (symbols == nullptr || names == nullptr) return 0;
  for (int table = 0; table < 2; ++table) {
    if (tables[table] == nullptr) continue;
    for (size_t i = 0; i < sizes[table] / sizeof(ElfW(Rela)); ++i) {
      const ElfW(Rela)& relocation = tables[table][i];
      uint32_t type = ELF64_R_TYPE(relocation.r_info);
      if (type != kJumpSlot && type != kGlobalData) continue;
      if (std::strcmp(names + symbols[ELF64_R_SYM(relocation.r_info)].st_name, redirect->symbol) != 0) continue;
      auto** slot = reinterpret_cast<void**>(info->dlpi_addr + relocation.r_offset);
      void* held = __atomic_load_n(slot, __ATOMIC_SEQ_CST);
      // A slot not yet bound (lazy binding) holds the library's own PLT stub, which would
      // bind it over ours and call back here: left alone, as one redirected already.
      Dl_info where;
      if (held == redirect->replacement || dladdr(held, &where) == 0 ||
          reinterpret_cast<uintptr_t>(where.dli_fbase) == info->dlpi_addr) {
        continue;
      }
      if (*redirect->original == nullptr) __atomic_store_n(redirect->original, held, __ATOMIC_SEQ_CST);
      if (held != *redirect->original) continue;
      PointSlot(info, slot, redirect->replacement);
    }
  }
  return 1;
}

// `library`'s calls of `symbol` go to `replacement`, and `*original` (nullptr before) is
// what they called, set before the first call can reach `replacement`; it stays nullptr
// where none was redirected (no such call, the library not loaded, or not bound yet:
// PyTorch/XLA's is bound at load).
void RedirectCalls(const char* library, const char* symbol, void* replacement, void** original) {
  Redirect redirect{library, symbol, replacement, original};
  dl_iterate_phdr(RedirectIn, &redirect);
}
#else
void RedirectCalls(const char*, const char*, void*, void**) {}
#endif

}  // namespace
