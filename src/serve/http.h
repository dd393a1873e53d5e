// The HTTP front of `h3 serve` (cpp-httplib, a Debian package): routes, authentication, request limits, JSON
// errors, server-sent events and the web page. docs/api.md documents every route and field.
#pragma once
#include <memory>

#include "serve/supervisor.h"

namespace h3::serve {

class HttpServer {
 public:
  explicit HttpServer(Supervisor& sup);
  ~HttpServer();
  // Binds (throws h3::Error naming the address when it cannot) and serves until stop().
  void bind();
  void listen();
  void stop();
  int port() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The embedded web page (serve/web_page.cpp).
const char* web_page_html();

}  // namespace h3::serve
