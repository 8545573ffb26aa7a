#include "curl_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "wmap/util/error.h"

namespace wmap::remote {
namespace {

// The SONAME of every libcurl 7.x/8.x build (Debian: libcurl4 or libcurl3-gnutls's
// libcurl-gnutls.so.4; the first is what libcurl4-openssl-dev links and what we test).
constexpr const char* kLibrary = "libcurl.so.4";
constexpr unsigned kMinVersion = 0x074B00;  // 7.75.0: CURLOPT_AWS_SIGV4

struct Loaded {
  CurlApi api{};
  std::string error;  // empty: api is usable
};

template <typename F>
bool bind(void* lib, const std::string& library, const char* name, F& out, std::string& error) {
  void* sym = dlsym(lib, name);
  if (!sym) {
    if (error.empty()) error = library + " has no " + name + " (" + dlerror() + ")";
    return false;
  }
  out = reinterpret_cast<F>(sym);
  return true;
}

Loaded open_library() {
  Loaded l;
  // WMAP_LIBCURL: another build or place (libcurl-gnutls.so.4, a path); default the SONAME.
  const char* env = std::getenv("WMAP_LIBCURL");
  const std::string name = env && *env ? env : kLibrary;
  // RTLD_LOCAL: libcurl's symbols stay out of the global scope, so an engine's own libcurl (or a
  // different build of it) loaded later is not interposed on.
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    l.error = "remote paths need libcurl 7.75 or newer, and " + name + (env && *env ? " (WMAP_LIBCURL)" : "") +
              " could not be loaded: " + (why ? why : "unknown reason") +
              " (Debian: apt-get install libcurl4; WMAP_LIBCURL names another library)";
    return l;
  }
  CurlApi& a = l.api;
  std::string& e = l.error;
  bind(lib, name, "curl_global_init", a.global_init, e);
  bind(lib, name, "curl_version_info", a.version_info, e);
  bind(lib, name, "curl_easy_init", a.easy_init, e);
  bind(lib, name, "curl_easy_cleanup", a.easy_cleanup, e);
  bind(lib, name, "curl_easy_reset", a.easy_reset, e);
  bind(lib, name, "curl_easy_setopt", a.easy_setopt, e);
  bind(lib, name, "curl_easy_getinfo", a.easy_getinfo, e);
  bind(lib, name, "curl_easy_perform", a.easy_perform, e);
  bind(lib, name, "curl_easy_strerror", a.easy_strerror, e);
  bind(lib, name, "curl_multi_init", a.multi_init, e);
  bind(lib, name, "curl_multi_cleanup", a.multi_cleanup, e);
  bind(lib, name, "curl_multi_add_handle", a.multi_add_handle, e);
  bind(lib, name, "curl_multi_remove_handle", a.multi_remove_handle, e);
  bind(lib, name, "curl_multi_perform", a.multi_perform, e);
  bind(lib, name, "curl_multi_poll", a.multi_poll, e);
  bind(lib, name, "curl_multi_info_read", a.multi_info_read, e);
  bind(lib, name, "curl_multi_strerror", a.multi_strerror, e);
  bind(lib, name, "curl_slist_append", a.slist_append, e);
  bind(lib, name, "curl_slist_free_all", a.slist_free_all, e);
  if (!e.empty()) {
    e = "remote paths need libcurl 7.75 or newer: " + e;
    return l;
  }
  const curl_version_info_data* v = a.version_info(CURLVERSION_NOW);
  if (!v || v->version_num < kMinVersion) {
    e = "remote paths need libcurl 7.75 or newer (CURLOPT_AWS_SIGV4); " + name + " is " +
        (v && v->version ? v->version : "of unknown version");
    return l;
  }
  if (a.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    e = std::string("libcurl ") + v->version + ": global init failed";
    return l;
  }
  return l;  // never closed: handles live in thread_local caches until their threads end
}

}  // namespace

const CurlApi& curl() {
  static const Loaded loaded = open_library();
  if (!loaded.error.empty()) throw Error(ErrorCode::kUnsupported, loaded.error);
  return loaded.api;
}

}  // namespace wmap::remote
