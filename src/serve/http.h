// The HTTP front of `h3 serve` (GNU libmicrohttpd, a Debian package; why: serve/http.cpp): connection and
// request limits, the security rules (serve/http_policy.h), the routes (serve/http_routes.h), server-sent
// events and the web page. docs/api.md documents every route, limit and rule.
#pragma once
#include <memory>

#include "serve/supervisor.h"

namespace h3::serve {

class HttpServer {
 public:
  explicit HttpServer(Supervisor& sup);
  ~HttpServer();
  // Binds and starts serving (throws h3::Error naming the address when it cannot bind).
  void bind();
  // Waits until stop().
  void listen();
  // Stops accepting, ends the event streams, finishes queued requests, closes every connection.
  void stop();
  int port() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The embedded web page (serve/web_page.cpp).
const char* web_page_html();

}  // namespace h3::serve
