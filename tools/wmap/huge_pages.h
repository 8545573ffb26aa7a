#pragma once
// Transparent huge pages for the CLI's metadata memory (the catalog and the plan).

namespace wmap::cli {

// On the VMs we measure on, faulting in one fresh 4 KiB page costs ~10 µs: more than parsing or
// copying what goes into it. `inspect` and `plan` therefore move malloc's main heap onto
// transparent huge pages (one fault per 2 MiB), in-process, before anything large is allocated:
// the heap is grown once by kHugeHeapBytes of address space (M_TOP_PAD; pages are only backed
// when touched), that range is advised MADV_HUGEPAGE, and the main arena stops using mmap for
// large blocks (M_MMAP_MAX = 0) and stops trimming, so the catalog's and the plan's big arrays
// land in it too. Threads' arenas keep 4 KiB pages (measured: making every thread share the
// main arena cost more in lock contention than it saved in faults).
// An earlier version re-executed the process with GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which
// does the same inside glibc but pays a second process start (~12 ms of dynamic loading here);
// see docs/performance.md for both, measured side by side.
// Nothing happens when WMAP_HUGE_PAGES=0, when GLIBC_TUNABLES already says anything about
// hugetlb (glibc does it then, the user's choice), when the kernel's THP mode is `never`, in
// sanitizer builds (their allocator is not glibc's), or for other commands: `load` maps its
// parameter buffers huge itself (host_device.cc). Call first in main, before any thread starts.
void use_huge_pages_for_metadata(int argc, char** argv);

// What use_huge_pages_for_metadata decided and why, for the debug log ("malloc huge pages: ...").
const char* huge_pages_decision();

}  // namespace wmap::cli
