// OffloadedSequence: one sequence whose KV cache is larger than its device budget
// (docs/offload.md: offloaded-sequence mode, the precision ladder, schedule-driven
// prefetch, §7 heat; docs/offload.md).
//
// The sequence owns a block table: for every (layer, chunk) it records where the block lives, a
// device slot, a host slot and/or a record on the SSD, and which of those copies are current.
// A device budget (in blocks) bounds the device slots held at any time; it is never exceeded.
// When a slot is needed and the budget is full, the coldest unpinned block is demoted. Cold
// means, first, "next needed furthest in the layer schedule" (in a forward pass layers come in
// order, so the block of the layer just computed is needed last; plain recency would evict
// exactly the block needed next), then least heat (the attention mass decode gave the chunk,
// decayed over time: ObserveHeat), sink chunks last, then least recently used. Loads ahead of
// need (prefetch) only take slots of clean blocks (a current copy below), so prefetching never
// forces a write-back. A demoted device block moves to a free host slot; otherwise, current on
// the SSD, it is dropped; otherwise it is written back to the host, evicting a host block to the
// SSD (dirty host victims go down in batches). Once a block is on the device its host copy is
// released if the SSD also holds it, so the tiers hold distinct blocks (exclusive).
//
// Precision ladder (options.ladder): below the device tier a block is stored with the rung the
// ladder chooses for its age (distance from the newest chunk): full precision for the sink chunk
// and the recent window, int8, then int4 for the oldest. Its host copy and SSD record carry the
// encoded bytes, so the SSD reads and the host holds fewer bytes per block. Promotion to the
// device (ladder_attention) keeps an int8/int4 block encoded: the device slot holds the encoded
// block, which the runtime attends straight from its codes (DeviceView, runtime/quant_attention.h);
// or, with LadderAttention::kDequantize, decodes it to the raw layout (on the sequence's codec
// threads, signalled like a copy). Lossless codecs other than raw are always decoded. As it grows,
// a block whose stored rung is finer than its age now calls for is re-encoded the next time it
// leaves the device (precision only ever goes down). Without a ladder every copy is raw (lossless,
// no codec work: the host -> device step is a plain copy).
//
// The pipeline is driven by the layer schedule and by events: AcquireLayer(N) makes N's chunks
// device-resident, streaming the missing ones SSD -> host -> device through whatever host room
// there is, and waits for their copy events (never returning a block before its event
// completed), then starts host -> device copies for layers N+1..N+depth and SSD -> host reads for
// layers N+1..N+depth+1, so with depth 1 SSD feeds layer N+2 while the device link feeds N+1 and
// compute runs on N. SSD reads go out in batches of up to kOffloadReadBatchBlocks, each with one
// completion. The depth adapts (policies/offload_depth.h) to the stall measured per layer.
// PlanLayer() lets a selector (Quest) narrow what a future layer will read so prefetch loads
// only that.
//
// Thread safety: one caller thread at a time (the forward pass). SSD completions arrive on the
// SSD tier's I/O thread and decode completions on the codec threads; they only touch the read
// pool (under mu_) and copy events. Ownership: the tiers are borrowed and must outlive the
// sequence; the sequence owns the slots it allocated and frees them (and erases its SSD records)
// in its destructor. Block spans are borrowed: see DeviceBlock().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "codecs/codec.h"
#include "codecs/precision_ladder.h"
#include "core/aligned_buffer.h"
#include "core/huge_page_buffer.h"
#include "core/kv_layout.h"
#include "core/mutex.h"
#include "core/thread_pool.h"
#include "kvtier/result.h"
#include "policies/offload_depth.h"
#include "tiers/memory_tier.h"
#include "tiers/tier.h"

namespace kvtier {

// Bounds (kept beside the interface they bound).
inline constexpr uint32_t kOffloadChunksMax = 1u << 16;        // Chunks per layer.
inline constexpr uint32_t kOffloadSsdReadsInFlightMax = 1024;  // SSD -> host reads in flight.
inline constexpr uint32_t kOffloadReadBatchBlocks = 8;         // Reads per SSD batch (one job).
inline constexpr uint32_t kOffloadWriteBatchBlocks = 8;        // Dirty host victims per write.
inline constexpr uint32_t kOffloadCodecThreadsMax = 16;
static_assert(kOffloadSsdReadsInFlightMax % kOffloadReadBatchBlocks == 0);

// How a ladder's int8/int4 blocks reach the device tier.
enum class LadderAttention : uint8_t {
  kQuantized = 0,   // Copied encoded; the device slot holds the encoded block (DeviceView).
  kDequantize = 1,  // Decoded to the raw layout on the codec threads (DeviceBlock).
};

struct OffloadSequenceOptions {
  KvLayout layout;                 // Geometry of every block (FP16/BF16/F32; see ladder).
  uint32_t chunks_max = 0;         // Chunks per layer this sequence may hold.
  uint32_t device_blocks_max = 0;  // Device budget in blocks: >= the blocks one layer reads.
  uint32_t sink_chunks = 1;        // Leading chunks demoted last (attention sinks).
  uint64_t sequence_id = 0;        // Names this sequence's records on the SSD.
  PrefetchDepthOptions depth;      // depth_min == depth_max == 0 disables prefetch.
  // Encoding below the device tier by age (codecs/precision_ladder.h, Tier::kHost rungs: the
  // host copy and the SSD record share the bytes). nullopt: raw, lossless copies.
  std::optional<codecs::PrecisionLadderOptions> ladder;
  // With a ladder: int8/int4 blocks stay encoded on the device (kQuantized; their MaxEncodedSize
  // must fit a device slot) or are decoded there (kDequantize). zstd-compressed rungs are decoded.
  LadderAttention ladder_attention = LadderAttention::kQuantized;
  uint32_t codec_threads = 1;  // Decoders for host -> device promotion with a ladder.
  // Heat (attention mass) halves every this many layer steps; 0 = 4 tokens (4 * layers).
  uint32_t heat_half_life_steps = 0;

  // InvalidArgument naming the first bad field.
  Status Validate() const;
};

// Sees each written block once more before its device copy goes (a selector summarizes the
// chunk's keys then, while the bytes are at hand). Called on the caller's thread, inside the
// sequence's call that evicts; must not call back into the sequence.
class OffloadObserver {
 public:
  virtual ~OffloadObserver() = default;
  virtual void OnWrittenBlockLeavesDevice(uint32_t layer, uint32_t chunk,
                                          std::span<const std::byte> block) = 0;
};

// Borrowed tiers. device and host are required: device slot_bytes >= the layout's block bytes,
// host slot_bytes >= OffloadedSequence::HostSlotBytes() (with an SSD a host slot holds a whole
// SSD record, so reads land in it directly: no staging buffer, no copy). ssd may be null, and
// then the host tier must hold whatever the device budget does not.
// ssd is the SSD tier through the Tier interface (tiers/tier.h): the SsdTierAdapter of an
// SsdTier (tiers/ssd/ssd_tier_adapter.h, in kvtier_tier_ssd), opened with LayoutDigest(layout), which
// verifies every record against it. Its reads must place the payload at the tier's
// PayloadOffset() into the buffer; a read that does not is refused as corrupt.
struct OffloadTiers {
  DeviceTier* device = nullptr;
  HostTier* host = nullptr;
  Tier* ssd = nullptr;
};

// Where a block's current copies are (a block may be current in several tiers at once).
struct BlockPlacement {
  bool written = false;
  bool device = false;
  bool host = false;
  bool ssd = false;
  uint8_t host_codec = 0;  // codecs::CodecId of the host copy; 0 = raw bytes.
  uint8_t ssd_codec = 0;   // ... of the SSD record.
};

// A pinned device block as it is stored in its slot: raw (codec 0; `bytes` is the block in the
// layout) or an int8/int4 block still encoded (`bytes` is the whole encoded block, codecs header
// included; `params` from that header, which DeviceView verified).
struct DeviceBlockView {
  uint8_t codec = 0;  // 0 raw, else codecs::CodecId::kInt8 / kInt4.
  codecs::CodecParams params;
  std::span<const std::byte> bytes;
};

struct OffloadStats {
  uint64_t layers_acquired = 0;
  uint64_t stall_us = 0;       // Total time AcquireLayer waited for data.
  uint64_t last_stall_us = 0;  // Of the latest AcquireLayer.
  uint32_t depth = 0;          // Current prefetch depth.
  uint32_t depth_grows = 0, depth_shrinks = 0;
  // Bytes moved. Device <-> host count the bytes copied or decoded into the device (raw block
  // bytes, or the encoded size of a block promoted encoded) and copied back; SSD counts record
  // bytes on disk (with a ladder: encoded, header and padding included).
  uint64_t bytes_host_to_device = 0, bytes_device_to_host = 0;
  uint64_t bytes_ssd_read = 0, bytes_ssd_written = 0;
  uint64_t blocks_prefetched = 0;  // Loads started ahead of their layer.
  uint64_t blocks_acquired = 0;    // Blocks AcquireLayer handed out.
  uint64_t blocks_demand = 0;      // ... of which it found missing (misses).
  uint64_t device_evictions = 0, host_evictions = 0;
  uint64_t ssd_reads = 0, ssd_writes = 0;  // Blocks.
  // Ladder: blocks encoded on demotion, of which re-encoded to a coarser rung as they aged, and
  // blocks decoded on promotion; encoded blocks per rung (int8 / int4 / lossless codec).
  uint64_t blocks_encoded = 0, blocks_reencoded = 0, blocks_decoded = 0;
  // Ladder, LadderAttention::kQuantized: int8/int4 blocks promoted to the device still encoded.
  uint64_t blocks_promoted_encoded = 0;
  uint64_t blocks_spilled = 0;  // Demoted device -> SSD directly (host full of needed blocks).
  uint64_t encoded_int8 = 0, encoded_int4 = 0, encoded_lossless = 0;
  uint32_t device_blocks = 0, device_blocks_peak = 0, host_blocks = 0;
};

class OffloadedSequence {
 public:
  static Result<std::unique_ptr<OffloadedSequence>> Create(const OffloadSequenceOptions& options,
                                                           const OffloadTiers& tiers);
  ~OffloadedSequence();
  OffloadedSequence(const OffloadedSequence&) = delete;
  OffloadedSequence& operator=(const OffloadedSequence&) = delete;

  // The largest payload a block of the sequence may have: raw, or any rung of `ladder`.
  static uint64_t PayloadBytesMax(const KvLayout& layout,
                                  const std::optional<codecs::PrecisionLadderOptions>& ladder = {});
  // Host slot size the sequence needs: PayloadBytesMax, as a whole record of `ssd` when there is
  // one (its ReadBufferBytes: the tier's framing around the payload), rounded up to 4 KiB.
  static uint32_t HostSlotBytes(const KvLayout& layout, const Tier* ssd,
                                const std::optional<codecs::PrecisionLadderOptions>& ladder = {});

  const KvLayout& layout() const { return options_.layout; }
  uint32_t chunks_max() const { return options_.chunks_max; }
  // 1 + the highest chunk written in `layer` (0 when none).
  uint32_t chunks_written(uint32_t layer) const { return chunks_written_[layer]; }

  // The block for writing, device-resident (loaded first if it was demoted). Its copies in lower
  // tiers become stale. The span is valid until the next call on this sequence. CPU device tier
  // only (the caller writes through the pointer). NoSpace beyond chunks_max or budget.
  Result<std::span<std::byte>> MutableBlock(uint32_t layer, uint32_t chunk);

  // Makes `chunks` (written, ascending) of `layer` device-resident, waits for their copies, pins
  // them until the next AcquireLayer or MutableBlock, then prefetches the next layers. NoSpace
  // (saying so) when the device budget cannot hold them or the host cannot stage one of them;
  // Corruption/IoError from the SSD or a codec (never wrong bytes).
  Status AcquireLayer(uint32_t layer, std::span<const uint32_t> chunks);
  // A block pinned by the latest AcquireLayer and held raw (programmer error otherwise; an
  // encoded device block is read through DeviceView). Valid until the next non-const call.
  std::span<const std::byte> DeviceBlock(uint32_t layer, uint32_t chunk) const;
  // A block pinned by the latest AcquireLayer, raw or encoded. An encoded block's header is
  // verified first (codecs::DecodeBlockHeader, its codec and geometry against the sequence's):
  // Corruption naming the block when it does not verify, so a damaged block is never attended.
  // Valid until the next non-const call.
  Result<DeviceBlockView> DeviceView(uint32_t layer, uint32_t chunk) const;
  // A device-resident raw block whose copies completed, or an empty span (for summaries).
  std::span<const std::byte> PeekDeviceBlock(uint32_t layer, uint32_t chunk);

  // Writes every block that no tier below holds yet (written on the device and still there, or
  // demoted to the host) down to the SSD and keeps its copy where it is, now clean. For when the
  // sequence is idle, after prefill: decode then evicts those copies without writing them, so a
  // decoded token does not pay for the prefill's write-back. A no-op without an SSD tier.
  Status WriteBack();

  // What a future AcquireLayer(layer) will ask for, so prefetch loads only that. Without a plan
  // prefetch assumes every written chunk.
  void PlanLayer(uint32_t layer, std::span<const uint32_t> chunks);
  void ClearPlan(uint32_t layer);

  // `observer` (borrowed; nullptr = none) is told about written blocks leaving the device.
  void SetObserver(OffloadObserver* observer) { observer_ = observer; }

  // Attention feedback: the mass (0..1) that the latest decoded token gave this chunk of `layer`.
  // Heat keeps the most recent observations (decayed by heat_half_life_steps) and orders
  // victims that are needed equally soon.
  void ObserveHeat(uint32_t layer, uint32_t chunk, float mass);
  float Heat(uint32_t layer, uint32_t chunk) const;

  BlockPlacement Placement(uint32_t layer, uint32_t chunk) const;
  OffloadStats Stats() const;
  // Corruption describing the first broken invariant of the block table (tests).
  Status CheckInvariants() const;

 private:
  struct Entry;
  struct ReadBatch;
  class CodecPool;
  OffloadedSequence(const OffloadSequenceOptions& options, const OffloadTiers& tiers);
  Status Init();

  // Block table (offload_sequence.cc).
  size_t Index(uint32_t layer, uint32_t chunk) const;
  uint32_t LayerOf(size_t index) const;
  uint32_t ChunkOf(size_t index) const;
  std::byte* HostData(uint32_t slot);  // The block's bytes inside a host slot.
  uint32_t Distance(size_t index) const;
  float HeatAt(size_t index) const;
  bool Colder(size_t a, size_t b) const;  // a is the better victim among equally distant ones.
  bool DeviceCopyClean(size_t index) const;
  void TrackDevice(size_t index, bool resident);
  void TrackHost(size_t index, bool resident);
  Result<uint32_t> AllocateDevice(uint32_t distance_min, bool clean_only);
  int64_t FindDeviceVictim(uint32_t distance_min, bool clean_only) const;
  Status EvictDevice(size_t index, bool may_evict_host);
  Status DemoteToHost(size_t index, bool may_evict_host);
  Result<uint32_t> AllocateHost(uint32_t distance_min, bool clean_only);
  int64_t FindHostVictim(uint32_t distance_min, bool clean_only, bool reading) const;
  Status EvictHostBatch(size_t first, uint32_t distance_min);
  void FreeHost(size_t index);
  void ReleaseHostCopies();
  Status LoadToDevice(std::span<const size_t> indexes, uint32_t distance_min, bool* pressure);
  Status BringToDevice(std::span<const size_t> indexes);
  Status Prefetch(uint32_t layer, bool* pressure);
  void Unpin();
  void PlannedChunks(uint32_t layer, std::vector<uint32_t>* out) const;

  // SSD and codec work (offload_sequence_io.cc).
  BlockKey SsdKey(size_t index) const;
  codecs::CodecParams RungFor(size_t index) const;
  Status EncodeInto(size_t index, const codecs::CodecParams& rung, std::span<std::byte> out,
                    uint8_t* codec, uint32_t* bytes);
  Status EncodeToHost(size_t index, const codecs::CodecParams& rung);
  Status SpillToSsd(size_t index);
  // Writes the device copy of `index` to the SSD through the spill buffer (the device copy stays).
  Status WriteDeviceToSsd(size_t index);
  Status WriteToSsd(std::span<const size_t> indexes);
  Status StartReads(std::span<const size_t> indexes, uint32_t distance_min, size_t* started);
  Status FinishBatch(uint32_t batch);
  Status HarvestReads();
  Status WaitRead(size_t index);
  Status WaitAnyRead();
  Status TakeReadError(size_t index);
  void OnBatchDone(uint32_t batch, Status status) KV_EXCLUDES(mu_);
  CopyEvent DecodeToDevice(std::span<const size_t> indexes);
  bool KeepsEncoded(uint8_t codec) const;  // Promoted without decoding (LadderAttention).
  // The raw bytes of the block's device copy: the slot itself, or an encoded copy decoded into
  // raw_ (Corruption when it does not decode).
  Result<std::span<const std::byte>> RawDeviceBytes(size_t index);
  Status MakeDeviceRaw(size_t index);  // Decodes an encoded device copy in its slot.

  OffloadSequenceOptions options_;
  OffloadTiers tiers_;
  OffloadObserver* observer_ = nullptr;
  uint64_t block_bytes_;
  size_t host_offset_;  // Of the block in a host slot: the SSD tier's PayloadOffset().
  codecs::BlockGeometry geometry_;
  std::optional<codecs::PrecisionLadder> ladder_;
  std::vector<Entry> entries_;  // [layer * chunks_max + chunk].
  std::vector<uint32_t> chunks_written_;
  uint32_t newest_chunk_ = 0;  // Highest chunk written in any layer.
  std::vector<std::vector<uint32_t>> plans_;
  std::vector<uint8_t> has_plan_;
  std::vector<size_t> pinned_;
  std::vector<size_t> device_list_;  // Entries holding a device slot (victim candidates).
  std::vector<size_t> host_list_;    // Entries holding a host slot.
  uint32_t cursor_layer_ = 0;
  uint64_t tick_ = 0;  // Advances per block use (recency).
  uint64_t step_ = 0;  // Advances per layer step (heat decay).
  double heat_half_life_steps_ = 1.0;
  PrefetchDepthController depth_;
  OffloadStats stats_;
  std::vector<ReadBatch> batches_;                  // Pool, fixed at Init.
  std::unordered_map<size_t, Status> read_errors_;  // Failed reads, until their block is needed.
  std::vector<uint32_t> free_batches_;
  std::vector<uint32_t> busy_batches_;
  // Reused lists, one per function so that no caller's list is clobbered by a callee.
  std::vector<size_t> missing_scratch_, left_scratch_, ready_scratch_, evict_scratch_;
  std::vector<size_t> raw_scratch_, decode_scratch_, prefetch_reads_, prefetch_loads_;
  std::vector<uint32_t> scratch_chunks_;
  std::vector<CopyRegion> regions_;
  std::unique_ptr<codecs::CodecContext> caller_codec_;  // Encodes on the caller's thread.
  // One SSD record: device -> SSD demotion when the host is full. On a huge page, as the staging
  // buffers are: the SSD tier writes the record from it with O_DIRECT (core/huge_page_buffer.h).
  HugePageBuffer spill_;
  AlignedBuffer raw_;    // One raw block: an encoded device copy decoded (ladder only).
  std::unique_ptr<CodecPool> codec_pool_;  // Decodes (ladder only).

  Mutex mu_;
  CondVar read_cv_;
  std::vector<uint8_t> batch_done_ KV_GUARDED_BY(mu_);
  std::vector<Status> batch_status_ KV_GUARDED_BY(mu_);
};

}  // namespace kvtier
