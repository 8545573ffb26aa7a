#pragma once
// Symbol visibility of libwmap. The core is compiled with -fvisibility=hidden: only what a
// header under core/include/wmap declares is exported. Each such header wraps its declarations
// in WMAP_PUBLIC_BEGIN / WMAP_PUBLIC_END; the executor's, the devices' and the parsers' private
// headers (core/src/**) and every helper in a .cc file stay inside the library. WMAP_API exports a
// private declaration the tests drive through a checking fake: the CUDA runtime seam
// (cuda_seam.h), the CUDA device over it and its staging ring.
//
// Installed headers (cmake --install) are the engine API (loader/, exec/destinations.h, device/)
// and the plugin ABI with its spec builders (abi/, spec/) and what they include; the other
// headers here are the in-tree CLI's and Python module's interface: exported so that every
// process holds one core, not installed, and without a compatibility promise.

#define WMAP_API __attribute__((visibility("default")))
#define WMAP_PUBLIC_BEGIN _Pragma("GCC visibility push(default)")
#define WMAP_PUBLIC_END _Pragma("GCC visibility pop")
