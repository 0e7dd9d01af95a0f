#include "runtime/generate.h"

#include <algorithm>

namespace kvtier::runtime {

Result<std::vector<uint32_t>> Generate(Model& model, KvBlockSource& kv,
                                       std::span<const uint32_t> prompt,
                                       const GenerateOptions& options) {
  KV_RETURN_IF_ERROR(Sampler::Validate(options.sampler));
  Sampler sampler(options.sampler);
  std::vector<float> logits;
  ForwardOptions forward{.chunk_tokens = options.chunk_tokens, .logits = LogitsMode::kLast};
  KV_RETURN_IF_ERROR(model.Forward(prompt, 0, kv, forward, &logits));
  std::vector<uint32_t> out;
  auto pos = static_cast<uint32_t>(prompt.size());
  for (uint32_t i = 0; i < options.max_new_tokens; ++i) {
    const uint32_t token = sampler.Sample(logits);
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), token) !=
        options.stop_tokens.end()) {
      break;
    }
    out.push_back(token);
    if (i + 1 == options.max_new_tokens) break;  // No need for logits nobody samples.
    KV_RETURN_IF_ERROR(
        model.Forward(std::span<const uint32_t>(&token, 1), pos, kv, forward, &logits));
    ++pos;
  }
  return out;
}

}  // namespace kvtier::runtime
