# Third-party dependencies, all from Debian's registry. Shared by the build and by the
# installed package config, so find_package(wmap) resolves the same libraries.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(simdjson REQUIRED)
find_package(spdlog REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(yaml-cpp REQUIRED)
find_package(Boost 1.74 REQUIRED COMPONENTS filesystem)
if(NOT TARGET wmap_re2)
  pkg_check_modules(RE2 REQUIRED IMPORTED_TARGET re2)
  add_library(wmap_re2 INTERFACE IMPORTED GLOBAL)
  target_link_libraries(wmap_re2 INTERFACE PkgConfig::RE2)
endif()
