// oneDNN's bf16 linear layer on a weight prepacked by `mkldnn::_reorder_linear_weight`, called through
// the dispatcher (what `linears.PackedLinear` calls from Python), for the ops that pick it for large
// batches and a kernel of their own for small ones (tile_linear.cpp's `linear`, quant_linear.cpp's
// `blocks_or_packed_linear`). Deciding inside one op rather than in a scripted Python branch saved about
// 0.8 ms of a 13 ms one-row decode step: the branch cost five interpreted ops per layer call.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

namespace tt_kernels {

inline at::Tensor onednn_packed_linear(const at::Tensor& x, const at::Tensor& packed,
                                       const std::optional<at::Tensor>& bias) {
  static const auto onednn =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                            c10::string_view, c10::List<std::optional<at::Scalar>>,
                            std::optional<c10::string_view>)>();
  return onednn.call(x, packed, bias, "none", c10::List<std::optional<at::Scalar>>(), "");
}

}  // namespace tt_kernels
