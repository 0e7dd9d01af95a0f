// CachedPrefill: the reference runtime acting as an inference engine in front of kvtier's
// prefix cache (docs/engine.md, prefix-cache mode).
//
// For a prompt it asks the engine how many leading tokens are cached (Lookup), loads those chunks
// into the sequence's KV blocks (Load), computes only the remaining tokens, and stores the new
// full chunks (Store). The load overlaps the computation layer by layer: the forward pass reaches
// layer N's blocks through a gate that waits for layer N's completion only, so layer 0 computes
// while later layers are still being copied or read from SSD.
//
// Correctness: the engine verifies every block it serves; when any layer fails to load (a block
// refused by verification or evicted in between), the whole prompt is recomputed from position 0
// instead, so a cache problem costs time, never wrong logits.
//
// Thread safety: one call uses its Model and KV blocks exclusively; the Engine may be shared.
// Ownership: borrows everything for the duration of the call; on return the KV blocks hold the
// prompt's cache and no engine handle refers to them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "kvtier/result.h"
#include "runtime/kv_blocks.h"
#include "runtime/model.h"

namespace kvtier::runtime {

struct CachedPrefillOptions {
  ForwardOptions forward;        // logits: kLast or kNone.
  StoreOptions store;            // Priority and TTL of the stored chunks.
  bool store_new_chunks = true;  // Store the prompt's full chunks after computing them.
};

struct CachedPrefillStats {
  size_t prompt_tokens = 0;
  size_t cached_tokens = 0;           // Tokens whose KV came from the cache (whole chunks).
  size_t computed_tokens = 0;         // Tokens run through the model.
  size_t stored_chunks = 0;           // Chunks newly taken by the engine.
  // Why the prompt's chunks were not (all) stored: the Store's or its Wait's error (NoSpace when
  // the SSD is full, Busy when memory is all pinned); OK when they were or nothing was asked.
  Status store_status;
  bool fell_back = false;             // A load failed and the prompt was recomputed.
  std::vector<TierKind> chunk_tiers;  // Where the cached chunks were found.
  uint64_t lookup_us = 0, compute_us = 0, store_us = 0;
  // Of compute_us, the time the forward pass stood waiting for layers still being loaded: the
  // part of the load that computing did not hide (0 when nothing was loaded).
  uint64_t load_wait_us = 0;
};

// `kv` must be empty (a fresh sequence) with capacity for the prompt; `prompt` non-empty. On
// success `kv` holds the prompt's KV and `logits` the last token's logits (when asked for).
Result<CachedPrefillStats> CachedPrefill(Model& model, Engine& engine, const Namespace& ns,
                                         std::span<const uint32_t> prompt, InMemoryKvBlocks& kv,
                                         const CachedPrefillOptions& options,
                                         std::vector<float>* logits);

// Stores every full chunk of `tokens` whose KV `kv` holds at positions [0, tokens.size()) (the
// engine skips the chunks it already has) and waits, since the engine borrows the blocks until
// then. For the tokens a decode loop appended after CachedPrefill, so that the next turn of a
// conversation finds them too. Returns the number of chunks newly taken.
Result<size_t> StoreKvChunks(Engine& engine, const Namespace& ns, std::span<const uint32_t> tokens,
                             InMemoryKvBlocks& kv, const StoreOptions& options);

}  // namespace kvtier::runtime
