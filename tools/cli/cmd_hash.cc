// `kvtier hash`: computes the namespace digest and the chunk hashes of a token sequence, exactly
// as the engine keys blocks (docs/key_format.md), and prints them as JSON. It lets operators and
// other implementations check keys by hand, and the CLI test checks it against the doc's vectors.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "core/block_key.h"
#include "core/kv_layout.h"
#include "core/limits.h"
#include "token_file.h"
#include "json_output.h"

namespace kvtier::cli {
namespace {

class HashCommand final : public Command {
 public:
  explicit HashCommand(CLI::App* app)
      : Command(app->add_subcommand(
            "hash", "Print the namespace digest and chunk hashes of a token file as JSON")) {
    DeclareFlags(subcommand());
  }

  int Run() override;

 private:
  void DeclareFlags(CLI::App* sub) {
    sub->add_option("--layout", layout_text_,
                    "KV layout, e.g. layers=32,kv_heads=8,head_dim=128,dtype=f16,block_tokens=256 "
                    "(,kind=latent for an MLA model's latent cache, kv_heads=1)")
        ->required();
    sub->add_option("--salt", salt_, "Tenant salt (bytes of the string)")->required();
    sub->add_option("--model", model_name_, "Model name");
    sub->add_option("--weights-digest", weights_digest_hex_,
                    "SHA-256 of the model weights, 64 hex digits (default: all zero)");
    sub->add_option("--extra-key", extra_keys_,
                    "Extra namespace key (LoRA id, media hash); "
                    "repeatable, order matters")
        ->allow_extra_args(false);
    sub->add_option("--tokens", tokens_path_,
                    "File of whitespace-separated decimal token ids, '-' for stdin")
        ->required();
  }

  std::string layout_text_;
  std::string salt_;
  std::string model_name_;
  std::string weights_digest_hex_;
  std::vector<std::string> extra_keys_;
  std::string tokens_path_;
};

int HashCommand::Run() {
  Result<KvLayout> layout = ParseLayout(layout_text_);
  if (!layout.ok()) return Fail(layout.status().WithContext("--layout"));
  ModelIdentity model{.name = model_name_};
  if (!weights_digest_hex_.empty() && !FromHex(weights_digest_hex_, &model.weights_digest)) {
    return Fail(Status::InvalidArgument("--weights-digest: expected 64 hex digits"));
  }
  Result<Hash256> ns = NamespaceDigest(model, *layout, salt_, extra_keys_);
  if (!ns.ok()) return Fail(ns.status());
  Result<std::vector<uint32_t>> tokens = ReadTokenFile(tokens_path_, kTokensPerCallMax);
  if (!tokens.ok()) return Fail(tokens.status().WithContext("--tokens"));
  Result<std::vector<Hash256>> hashes = ChunkHashes(*ns, *tokens, layout->block_tokens);
  if (!hashes.ok()) return Fail(hashes.status());

  nlohmann::ordered_json out;
  out["namespace_digest"] = ToHex(*ns);
  out["layout_digest"] = ToHex(LayoutDigest(*layout));
  out["layout"] = layout->ToString();
  out["block_tokens"] = layout->block_tokens;
  out["token_count"] = tokens->size();
  out["tail_token_count"] = tokens->size() % layout->block_tokens;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Hash256& h : *hashes) list.push_back(ToHex(h));
  out["chunk_hashes"] = std::move(list);
  std::printf("%s\n", JsonText(out, 2).c_str());
  if (std::fflush(stdout) != 0) return Fail(Status::IoError("cannot write to stdout"));
  return kExitOk;
}

}  // namespace

std::unique_ptr<Command> MakeHashCommand(CLI::App* app) {
  return std::make_unique<HashCommand>(app);
}

}  // namespace kvtier::cli
