// The receiving half of a UCX connection: one frame at a time, a receive for
// its header message, checked, then one receive per blob straight into a pooled tensor.
#include <cstring>

#include <fmt/format.h>

#include "runtime/transport/transport_detail.hpp"
#include "runtime/transport/transport_ucx.hpp"

namespace troupe::net::detail {

namespace {

void on_received(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* s = static_cast<ucx_receiver::slot*>(user);
  s->done = true;
  s->status = status;
  s->length = info ? info->length : 0;
}

} // namespace

ucx_receiver::ucx_receiver() : head_(header_bytes + 8 * max_blobs + max_meta_bytes), blobs_(max_blobs) {}

void ucx_receiver::post(slot& s, void* buf, std::size_t len, ucp_tag_t tag) {
  s = slot{};
  s.expected = len;
  ucp_request_param_t p{};
  // UCX 1.13 leaves recv_info unset when a receive completes in place, so
  // always take the callback (it may run before ucp_tag_recv_nbx returns).
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = on_received;
  p.user_data = &s;
  auto* r = ucp_tag_recv_nbx(worker_, buf, len, tag, ~ucp_tag_t{0}, &p);
  if (UCS_PTR_IS_ERR(r)) {
    s.done = true;
    s.status = UCS_PTR_STATUS(r);
  } else {
    s.req = r; // freed once done
  }
}

void ucx_receiver::release(slot& s) {
  if (s.req)
    ucp_request_free(s.req);
  s.req = nullptr;
}

void ucx_receiver::start(ucp_worker_h worker) {
  worker_ = worker;
  in_header_ = true;
  post(head_slot_, head_.data(), head_.size(), ucx_tag(seq_, 0));
}

bool ucx_receiver::check(const slot& s, bool exact, const char* what, std::optional<failure>& fail) {
  if (s.status == UCS_ERR_MESSAGE_TRUNCATED || (s.status == UCS_OK && exact && s.length != s.expected))
    fail = failure{true, fmt::format("the {} is longer or shorter than announced", what)};
  else if (s.status != UCS_OK)
    fail = failure{false, ucs_status_string(s.status)};
  return !fail;
}

bool ucx_receiver::start_frame(std::optional<failure>& fail) {
  if (!check(head_slot_, false, "header message", fail))
    return false;
  header h;
  std::string err;
  auto len = head_slot_.length;
  if (len < header_bytes)
    err = fmt::format("truncated frame header ({} bytes)", len);
  else if (decode_header(head_.data(), limits{}, h, err) && h.type != frame_type::data)
    err = fmt::format("unexpected frame type {}", static_cast<int>(h.type));
  else if (err.empty() && len != header_bytes + 8 * h.blob_count + h.meta_bytes)
    err = fmt::format("a header message of {} bytes does not match its header", len);
  sizes_.assign(err.empty() ? h.blob_count : 0, 0);
  if (!sizes_.empty())
    std::memcpy(sizes_.data(), head_.data() + header_bytes, 8 * sizes_.size());
  for (std::size_t i = 0; i < sizes_.size() && err.empty(); ++i)
    check_blob_size(sizes_[i], i, err);
  if (!err.empty()) {
    fail = failure{true, err};
    return false;
  }
  frame_ = frame{};
  frame_.kind = h.kind;
  auto* meta = head_.data() + header_bytes + 8 * sizes_.size();
  frame_.meta.assign(meta, meta + h.meta_bytes);
  for (std::size_t i = 0; i < sizes_.size(); ++i) {
    try { // allocated only now, after every size passed its limit
      frame_.blobs.push_back(tensor_handle::empty({static_cast<std::int64_t>(sizes_[i])}, dtype::u8));
    } catch (const std::bad_alloc&) {
      fail = failure{true, fmt::format("cannot allocate {} bytes for blob {}", sizes_[i], i)};
      return false;
    }
    blobs_[i] = slot{};
    blobs_[i].done = true;
    if (sizes_[i] > 0)
      post(blobs_[i], frame_.blobs[i].raw(), sizes_[i], ucx_tag(seq_, i + 1));
  }
  in_header_ = false;
  return true;
}

bool ucx_receiver::poll(const std::function<void(frame&&)>& deliver, std::optional<failure>& fail) {
  bool any = false;
  while (!fail) {
    if (in_header_) {
      if (!head_slot_.done)
        return any;
      any = true;
      release(head_slot_);
      if (!start_frame(fail))
        return any;
    }
    for (std::size_t i = 0; i < sizes_.size(); ++i)
      if (!blobs_[i].done)
        return any;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      release(blobs_[i]);
      if (!check(blobs_[i], true, "blob", fail))
        return any;
    }
    deliver(std::move(frame_));
    ++delivered_;
    ++seq_;
    start(worker_);
    any = true;
  }
  return any;
}

void ucx_receiver::cancel() {
  if (!worker_)
    return;
  auto pending = [&] {
    bool any = head_slot_.req && !head_slot_.done;
    for (auto& s : blobs_)
      any |= s.req && !s.done;
    return any;
  };
  if (head_slot_.req && !head_slot_.done)
    ucp_request_cancel(worker_, head_slot_.req);
  for (auto& s : blobs_)
    if (s.req && !s.done)
      ucp_request_cancel(worker_, s.req);
  for (int i = 0; i < 10000 && pending(); ++i)
    ucp_worker_progress(worker_);
  release(head_slot_);
  for (auto& s : blobs_)
    release(s);
  worker_ = nullptr;
}

} // namespace troupe::net::detail
