// SessionTable: what the engine remembers of each session for access prediction
// (EngineOptions::prediction, docs/engine.md "Access prediction"): the leading chunk hashes of the
// session's latest request, so that when the predictor names the session its blocks can be
// promoted before the session's next request arrives.
//
// Why only chunk hashes and only the latest request: a session's next request usually extends
// its previous one (a multi-turn chat, an agent's growing context), so the previous request's
// chunks are the prefix the next one will look up; blocks are found through the engine's index
// and the SSD tier, never stored here.
//
// Bounds: at most sessions_max sessions (the least recently recorded is forgotten) and
// chunks_max chunk hashes per session (the leading ones: a prefix is only useful from its start).
//
// Thread safety: none; the engine guards it with its prediction mutex. Ownership: plain value.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/block_key.h"

namespace kvtier {

class SessionTable {
 public:
  SessionTable(uint32_t sessions_max, uint32_t chunks_max);

  // Remembers the first chunks_max of `chunks` as `session`'s latest request and makes it the
  // most recently seen session.
  void Record(uint64_t session, std::span<const Hash256> chunks);
  // The session's remembered chunks (valid until the next Record), or nullptr when unknown.
  const std::vector<Hash256>* Find(uint64_t session) const;
  size_t size() const { return map_.size(); }

 private:
  struct Session {
    std::vector<Hash256> chunks;
    std::list<uint64_t>::iterator lru;
  };

  uint32_t sessions_max_;
  uint32_t chunks_max_;
  std::unordered_map<uint64_t, Session> map_;
  std::list<uint64_t> lru_;  // Front: most recently recorded.
};

}  // namespace kvtier
