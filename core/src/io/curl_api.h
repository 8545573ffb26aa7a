#pragma once
// libcurl, opened on first use. libwmap does not link libcurl: its ~30 dependent libraries
// (TLS, Kerberos, LDAP, SSH, IDN) and their constructors cost a local run about 3.5 ms of every
// process start (issue 42: `wmap plan` lost a third of its lead over Python's header parse when
// remote I/O landed). The first remote request dlopens libcurl.so.4 and resolves the functions
// below; a machine without it gets an error naming the library and the package, and local paths
// never need it. Internal to the io stage; <curl/curl.h> is included for its types and constants.

#include <curl/curl.h>

namespace wmap::remote {

// The libcurl functions http_transfer.cc calls, by their names without the `curl_` prefix.
struct CurlApi {
  CURLcode (*global_init)(long flags);
  curl_version_info_data* (*version_info)(CURLversion);
  CURL* (*easy_init)();
  void (*easy_cleanup)(CURL*);
  void (*easy_reset)(CURL*);
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  CURLcode (*easy_perform)(CURL*);
  const char* (*easy_strerror)(CURLcode);
  CURLM* (*multi_init)();
  CURLMcode (*multi_cleanup)(CURLM*);
  CURLMcode (*multi_add_handle)(CURLM*, CURL*);
  CURLMcode (*multi_remove_handle)(CURLM*, CURL*);
  CURLMcode (*multi_perform)(CURLM*, int*);
  CURLMcode (*multi_poll)(CURLM*, struct curl_waitfd[], unsigned, int, int*);
  CURLMsg* (*multi_info_read)(CURLM*, int*);
  const char* (*multi_strerror)(CURLMcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);
};

// The library (WMAP_LIBCURL, else libcurl.so.4), opened and initialised (curl_global_init) once
// per process, thread-safe. Throws kUnsupported when it cannot be opened, lacks a function, or is older than 7.75 (the
// first with CURLOPT_AWS_SIGV4), naming the library, the reason and what to install; every later
// call throws the same error.
const CurlApi& curl();

}  // namespace wmap::remote
