// Test support: a client of a running dashboard server (HTTP requests and the
// WebSocket feed at /ws), shared by the server's unit test and the launch test.
#pragma once

#include <string>
#include <utility> // before Boost.Asio, whose awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast.hpp>

namespace troupe::testing {

namespace dash_beast = boost::beast;

/// `{host, port}` of `http://HOST:PORT/`.
inline std::pair<std::string, std::string> split_url(const std::string& url) {
  auto hp = url.substr(7, url.size() - 8);
  auto c = hp.rfind(':');
  return {hp.substr(0, c), hp.substr(c + 1)};
}

/// One HTTP/1.1 request to the server at `url`; its response.
inline dash_beast::http::response<dash_beast::http::string_body>
http_request(const std::string& url, dash_beast::http::verb verb, const std::string& target) {
  namespace http = dash_beast::http;
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::resolver resolver{ioc};
  dash_beast::tcp_stream stream{ioc};
  auto [host, port] = split_url(url);
  stream.connect(resolver.resolve(host, port));
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, host);
  req.prepare_payload();
  http::write(stream, req);
  dash_beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(stream, buf, res);
  return res;
}

/// A WebSocket connection to the feed of the dashboard at `url`.
struct feed_connection {
  boost::asio::io_context ioc;
  dash_beast::websocket::stream<boost::asio::ip::tcp::socket> ws{ioc};

  explicit feed_connection(const std::string& url) {
    boost::asio::ip::tcp::resolver resolver{ioc};
    auto [host, port] = split_url(url);
    boost::asio::connect(ws.next_layer(), resolver.resolve(host, port));
    ws.handshake(host, "/ws");
  }
};

} // namespace troupe::testing
