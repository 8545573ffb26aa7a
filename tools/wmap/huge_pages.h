#pragma once
// Transparent huge pages for the CLI's metadata memory (the catalog and the plan).

namespace wmap::cli {

// On the VMs we measure on, faulting in one fresh 4 KiB page costs ~11 µs: more than parsing or
// copying what goes into it. glibc (2.35+) backs malloc's heap and its large chunks with
// transparent huge pages (one fault per 2 MiB) when the tunable glibc.malloc.hugetlb=1 is set,
// and reads tunables only when a process starts. So the CLI re-executes itself once with it
// (docs/performance.md has the figures). Nothing happens when WMAP_HUGE_PAGES=0, when
// GLIBC_TUNABLES already says anything about hugetlb (the user's choice wins, and the
// re-executed process stops here), when the kernel's THP mode is `never`, in sanitizer builds
// (their allocator is not glibc's), or when /proc/self/exe cannot be executed (the run then
// goes on as it is). Only `inspect` and `plan` re-execute: `load` maps its parameter buffers
// huge itself (host_device.cc), and with the tunable on top a 1 GB TP1 load measured no faster
// (0.17 s either way back to back; interleaved with other processes 0.15-1.4 s with it, 0.14-0.15 s
// without), so it saves the second process start.
// Call first in main, before any thread or MPI starts.
void reexec_with_huge_pages(int argc, char** argv);

// What reexec_with_huge_pages decided and why, for the debug log ("malloc huge pages: ...").
const char* huge_pages_decision();

}  // namespace wmap::cli
