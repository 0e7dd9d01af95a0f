// Goal: show that the public C++ API (include/kvtier/engine.h) is the internal engine with other
// types: every public option reaches EngineOptions with its value, the public defaults are the
// engine's defaults, bad enum values and key settings are refused naming the field, and an engine
// opened through the API stores, looks up, loads layer by layer, pins, flushes and finds its SSD
// blocks again after a restart, with handles that may outlive the Engine.
// Method: public_api::ToEngineOptions on options whose every field differs from its default,
// compared field by field with internal options built by hand; PublicFieldCount pins the number of
// fields of each public options struct, so a field added without a check here fails to compile.
// The end-to-end cases run a tiny layout on real files in a ScopedTempDir.
#include "capi/public_api.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvtier/engine.h"
#include "testing/test_util.h"
#include "tiers/redis/redis_options.h"
#include "tiers/remote_crypto.h"
#include "tiers/ssd/ssd_options.h"

namespace kvtier {
namespace {

// The number of fields of aggregate T: the largest n for which T{AnyField x n} compiles.
struct AnyField {
  template <typename T>
  operator T() const {  // NOLINT(google-explicit-constructor): only in unevaluated operands.
    return T{};
  }
};
template <typename T, typename... Fields>
constexpr size_t PublicFieldCount() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; }) {
    return PublicFieldCount<T, Fields..., AnyField>();
  } else {
    return sizeof...(Fields);
  }
}
// Update these counts only together with the checks below.
static_assert(PublicFieldCount<api::EngineOptions>() == 24);
static_assert(PublicFieldCount<api::Layout>() == 6);
static_assert(PublicFieldCount<api::DeviceTierOptions>() == 3);
static_assert(PublicFieldCount<api::HostTierOptions>() == 5);
static_assert(PublicFieldCount<api::SsdTierOptions>() == 20);
static_assert(PublicFieldCount<api::RemoteTierOptions>() == 23);
static_assert(PublicFieldCount<api::PredictionOptions>() == 7);
static_assert(PublicFieldCount<api::CodecOptions>() == 3);
static_assert(PublicFieldCount<api::Keyring>() == 2);

void ExpectHostEq(const HostTierOptions& a, const HostTierOptions& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.capacity_bytes, b.capacity_bytes);
  EXPECT_EQ(a.numa_node, b.numa_node);
  EXPECT_EQ(a.huge_pages, b.huge_pages);
  EXPECT_EQ(a.lock, b.lock);
  EXPECT_EQ(a.prefault, b.prefault);
}

void ExpectKeyringEq(const std::optional<RemoteKeyring>& a, const std::optional<RemoteKeyring>& b) {
  ASSERT_EQ(a.has_value(), b.has_value());
  if (!a.has_value()) return;
  ASSERT_EQ(a->keys().size(), b->keys().size());
  for (size_t i = 0; i < a->keys().size(); ++i) {
    EXPECT_EQ(a->keys()[i].id, b->keys()[i].id);
    EXPECT_EQ(a->keys()[i].bytes, b->keys()[i].bytes);
  }
}

void ExpectSsdEq(const SsdTierOptions& a, const SsdTierOptions& b) {
  EXPECT_EQ(a.dirs, b.dirs);
  EXPECT_EQ(a.capacity_bytes, b.capacity_bytes);
  EXPECT_EQ(a.segment_bytes, b.segment_bytes);
  EXPECT_EQ(a.sync, b.sync);
  EXPECT_EQ(a.sync_interval_ms, b.sync_interval_ms);
  EXPECT_EQ(a.checkpoint_interval_ms, b.checkpoint_interval_ms);
  EXPECT_EQ(a.io_depth, b.io_depth);
  EXPECT_EQ(a.io_backend, b.io_backend);
  EXPECT_EQ(a.direct_io, b.direct_io);
  EXPECT_EQ(a.queue_jobs_max, b.queue_jobs_max);
  EXPECT_EQ(a.staging_buffer_bytes, b.staging_buffer_bytes);
  EXPECT_EQ(a.staging_buffers, b.staging_buffers);
  EXPECT_EQ(a.write_stall_ms_max, b.write_stall_ms_max);
  EXPECT_EQ(a.admission, b.admission);
  EXPECT_EQ(a.admission_requests, b.admission_requests);
  EXPECT_EQ(a.admission_slots, b.admission_slots);
  EXPECT_EQ(a.write_budget_bytes_per_s, b.write_budget_bytes_per_s);
  EXPECT_EQ(a.write_budget_burst_bytes, b.write_budget_burst_bytes);
  ExpectKeyringEq(a.keyring, b.keyring);
  EXPECT_EQ(a.file_mode, b.file_mode);
}

void ExpectRemoteEq(const RemoteTierOptions& a, const RemoteTierOptions& b) {
  ASSERT_EQ(a.stores.size(), 1u);
  ASSERT_EQ(b.stores.size(), 1u);
  ASSERT_NE(FindRedisOptions(a.stores), nullptr);
  ASSERT_NE(FindRedisOptions(b.stores), nullptr);
  const RedisStoreOptions& ra = a.stores.Get<RedisStoreOptions>(kRedisStoreName);
  const RedisStoreOptions& rb = b.stores.Get<RedisStoreOptions>(kRedisStoreName);
  EXPECT_EQ(ra.endpoints, rb.endpoints);
  EXPECT_EQ(ra.mode, rb.mode);
  EXPECT_EQ(ra.user, rb.user);
  EXPECT_EQ(ra.password, rb.password);
  EXPECT_EQ(ra.connect_timeout_ms, rb.connect_timeout_ms);
  EXPECT_EQ(ra.command_timeout_ms, rb.command_timeout_ms);
  EXPECT_EQ(ra.breaker.failures_to_open, rb.breaker.failures_to_open);
  EXPECT_EQ(ra.breaker.open_cooldown_us, rb.breaker.open_cooldown_us);
  EXPECT_EQ(ra.redirects_max, rb.redirects_max);
  EXPECT_EQ(ra.topology_refresh_interval_us, rb.topology_refresh_interval_us);
  EXPECT_EQ(ra.cluster_allowed_hosts, rb.cluster_allowed_hosts);
  EXPECT_EQ(ra.key_prefix, rb.key_prefix);
  ExpectKeyringEq(ra.keyring, rb.keyring);
  EXPECT_EQ(ra.insecure_plaintext, rb.insecure_plaintext);
  EXPECT_EQ(a.store, b.store);
  EXPECT_EQ(a.write_policy, b.write_policy);
  EXPECT_EQ(a.admission, b.admission);
  EXPECT_EQ(a.admission_requests, b.admission_requests);
  EXPECT_EQ(a.admission_slots, b.admission_slots);
  EXPECT_EQ(a.write_budget_bytes_per_s, b.write_budget_bytes_per_s);
  EXPECT_EQ(a.write_budget_burst_bytes, b.write_budget_burst_bytes);
  EXPECT_EQ(a.promote_on_load, b.promote_on_load);
  EXPECT_EQ(a.io_threads, b.io_threads);
  EXPECT_EQ(a.connections, b.connections);
}

void ExpectPredictionEq(const PredictionOptions& a, const PredictionOptions& b) {
  EXPECT_EQ(a.enabled, b.enabled);
  EXPECT_EQ(a.window, b.window);
  EXPECT_EQ(a.successors_max, b.successors_max);
  EXPECT_EQ(a.sessions_max, b.sessions_max);
  EXPECT_EQ(a.session_chunks_max, b.session_chunks_max);
  EXPECT_EQ(a.predict_k, b.predict_k);
  EXPECT_EQ(a.blocks_max, b.blocks_max);
}

// Every field EngineOptions has, the tiers through the helpers above.
void ExpectOptionsEq(const EngineOptions& a, const EngineOptions& b) {
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.model.name, b.model.name);
  EXPECT_EQ(a.model.weights_digest, b.model.weights_digest);
  EXPECT_EQ(a.device.capacity_bytes, b.device.capacity_bytes);
  EXPECT_EQ(a.device.copy_threads, b.device.copy_threads);
  EXPECT_EQ(a.device.copy_queue_max, b.device.copy_queue_max);
  ExpectHostEq(a.host, b.host);
  EXPECT_EQ(a.device_backend, b.device_backend);
  EXPECT_EQ(a.cuda_device, b.cuda_device);
  ASSERT_EQ(a.cxl.has_value(), b.cxl.has_value());
  if (a.cxl.has_value()) ExpectHostEq(*a.cxl, *b.cxl);
  ASSERT_EQ(a.tiers.size(), b.tiers.size());
  ASSERT_EQ(FindSsdOptions(a.tiers) != nullptr, FindSsdOptions(b.tiers) != nullptr);
  if (FindSsdOptions(a.tiers) != nullptr) {
    ExpectSsdEq(a.tiers.Get<SsdTierOptions>(kSsdTierName),
                b.tiers.Get<SsdTierOptions>(kSsdTierName));
  }
  EXPECT_EQ(a.write_policy, b.write_policy);
  EXPECT_EQ(a.writeback_dirty_fraction, b.writeback_dirty_fraction);
  EXPECT_EQ(a.writeback_age_ms_max, b.writeback_age_ms_max);
  EXPECT_EQ(a.ssd_codec, b.ssd_codec);
  EXPECT_EQ(a.default_ttl_ms, b.default_ttl_ms);
  EXPECT_EQ(a.worker_threads, b.worker_threads);
  EXPECT_EQ(a.thread_cpus, b.thread_cpus);
  EXPECT_EQ(a.background_nice, b.background_nice);
  EXPECT_EQ(a.background_priority, b.background_priority);
  EXPECT_EQ(a.sink_chunks, b.sink_chunks);
  EXPECT_EQ(a.promote_on_load, b.promote_on_load);
  ASSERT_EQ(a.remote.has_value(), b.remote.has_value());
  if (a.remote.has_value()) ExpectRemoteEq(*a.remote, *b.remote);
  ExpectPredictionEq(a.prediction, b.prediction);
  EXPECT_EQ(a.staging_buffers, b.staging_buffers);
  EXPECT_EQ(a.env, b.env);
  EXPECT_EQ(a.logger, b.logger);
}

constexpr api::Layout kLayout{
    .layers = 2, .kv_heads = 1, .head_dim = 16, .dtype = api::DType::kF16, .block_tokens = 16};

TEST(PublicApiTest, DefaultsAreTheEnginesDefaults) {
  Result<EngineOptions> out = public_api::ToEngineOptions(
      {.layout = kLayout, .ssd = api::SsdTierOptions{}, .remote = api::RemoteTierOptions{}},
      nullptr);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EngineOptions expected;
  expected.layout = public_api::ToKvLayout(kLayout);
  expected.tiers.Emplace(kSsdTierName, SsdTierOptions{});
  expected.remote =
      RemoteTierOptions{.stores = TierOptionsSet::Of(kRedisStoreName, RedisStoreOptions{})};
  ExpectOptionsEq(*out, expected);
}

// The public options with every field away from its default, and the internal options they must
// become.
struct AllSet {
  api::EngineOptions in;
  EngineOptions expected;
};

api::HostTierOptions PublicHost(uint64_t capacity_bytes) {
  return {.capacity_bytes = capacity_bytes,
          .numa_node = 1,
          .huge_pages = api::HugePages::kOff,
          .lock = api::MemoryLock::kRequired,
          .prefault = false};
}

HostTierOptions InternalHost(const char* name, uint64_t capacity_bytes) {
  return {.name = name,
          .capacity_bytes = capacity_bytes,
          .numa_node = 1,
          .huge_pages = HugePages::kOff,
          .lock = MemoryLock::kRequired,
          .prefault = false};
}

api::SsdTierOptions PublicSsd(const std::string& key_file) {
  return {.dirs = {"/a", "/b"},
          .capacity_bytes = 5ull << 30,
          .segment_bytes = 2ull << 20,
          .sync = api::SsdSync::kPeriodic,
          .sync_interval_ms = 7,
          .checkpoint_interval_ms = 8,
          .io_depth = 9,
          .io_backend = api::IoBackend::kThreadPool,
          .direct_io = api::DirectIo::kRequired,
          .queue_jobs_max = 10,
          .staging_buffer_bytes = 8192,
          .staging_buffers = 11,
          .write_stall_ms_max = 12,
          .admission = api::Admission::kAfterRequests,
          .admission_requests = 13,
          .admission_slots = 14,
          .write_budget_bytes_per_s = 15,
          .write_budget_burst_bytes = 16,
          .keys = {.file = key_file},
          .file_mode = 0640};
}

SsdTierOptions InternalSsd(RemoteKeyring keys) {
  return {.dirs = {"/a", "/b"},
          .capacity_bytes = 5ull << 30,
          .segment_bytes = 2ull << 20,
          .sync = SsdSyncMode::kPeriodic,
          .sync_interval_ms = 7,
          .checkpoint_interval_ms = 8,
          .io_depth = 9,
          .io_backend = IoBackend::kThreadPool,
          .direct_io = DirectIo::kRequired,
          .queue_jobs_max = 10,
          .staging_buffer_bytes = 8192,
          .staging_buffers = 11,
          .write_stall_ms_max = 12,
          .admission = SsdAdmission::kAfterRequests,
          .admission_requests = 13,
          .admission_slots = 14,
          .write_budget_bytes_per_s = 15,
          .write_budget_burst_bytes = 16,
          .keyring = std::move(keys),
          .file_mode = 0640};
}

api::RemoteTierOptions PublicRemote(const std::string& key_text) {
  return {.endpoints = {"r1:1", "r2:2"},
          .mode = api::RemoteMode::kCluster,
          .user = "u",
          .password = "p",
          .connect_timeout_ms = 21,
          .command_timeout_ms = 22,
          .breaker_failures_to_open = 23,
          .breaker_open_cooldown_us = 24,
          .redirects_max = 3,
          .topology_refresh_interval_us = 25,
          .cluster_allowed_hosts = {"h1", "10.0.0.2"},
          .key_prefix = "kp",
          .keys = {.text = key_text},
          .insecure_plaintext = true,
          .write_policy = api::WritePolicy::kWriteBack,
          .admission = api::Admission::kAfterRequests,
          .admission_requests = 26,
          .admission_slots = 27,
          .write_budget_bytes_per_s = 28,
          .write_budget_burst_bytes = 29,
          .promote_on_load = false,
          .io_threads = 5,
          .connections = 7};
}

RemoteTierOptions InternalRemote(RemoteKeyring keys) {
  RedisStoreOptions redis{.endpoints = {"r1:1", "r2:2"},
                          .mode = RedisMode::kCluster,
                          .user = "u",
                          .password = "p",
                          .connect_timeout_ms = 21,
                          .command_timeout_ms = 22,
                          .breaker = {.failures_to_open = 23, .open_cooldown_us = 24},
                          .redirects_max = 3,
                          .topology_refresh_interval_us = 25,
                          .cluster_allowed_hosts = {"h1", "10.0.0.2"},
                          .key_prefix = "kp",
                          .keyring = std::move(keys),
                          .insecure_plaintext = true};
  return {.stores = TierOptionsSet::Of(kRedisStoreName, std::move(redis)),
          .write_policy = WritePolicy::kWriteBack,
          .admission = SsdAdmission::kAfterRequests,
          .admission_requests = 26,
          .admission_slots = 27,
          .write_budget_bytes_per_s = 28,
          .write_budget_burst_bytes = 29,
          .promote_on_load = false,
          .io_threads = 5,
          .connections = 7};
}

api::EngineOptions PublicAllSet(const std::string& ssd_key_file, const std::string& remote_keys) {
  api::EngineOptions in{
      .layout = {.layers = 3, .kv_heads = 2, .head_dim = 32, .dtype = api::DType::kBF16,
                 .block_tokens = 32, .kind = api::LayoutKind::kLatent},
      .model_name = "model",
      .device = {.capacity_bytes = 1 << 20, .copy_threads = 2, .copy_queue_max = 3},
      .host = PublicHost(2 << 20),
      .device_backend = api::DeviceBackend::kCpu,
      .cuda_device = 4,
      .cxl = PublicHost(3 << 20),
      .ssd = PublicSsd(ssd_key_file),
      .write_policy = api::WritePolicy::kWriteThrough,
      .writeback_dirty_fraction = 0.25,
      .writeback_age_ms_max = 77,
      .ssd_codec = {.codec = api::Codec::kInt8, .zstd_level = 3, .group_size = 64},
      .default_ttl_ms = 31,
      .worker_threads = 5,
      .thread_cpus = "all",
      .background_nice = 12,
      .background_priority = api::BackgroundPriority::kIdle,
      .sink_chunks = 6,
      .promote_on_load = false,
      .remote = PublicRemote(remote_keys),
      .prediction = {.enabled = true, .window = 3, .successors_max = 4, .sessions_max = 5,
                     .session_chunks_max = 6, .predict_k = 7, .blocks_max = 8},
      .staging_buffers = 33,
      .log = [](api::LogLevel, std::string_view) {}};
  in.weights_digest[0] = 0xab;
  in.weights_digest[31] = 0xcd;
  return in;
}

EngineOptions InternalAllSet(RemoteKeyring ssd_keys, RemoteKeyring remote_keys, Logger* logger) {
  EngineOptions e;
  e.layout = {.layers = 3, .kv_heads = 2, .head_dim = 32, .dtype = DType::kBF16,
              .block_tokens = 32, .kind = LayoutKind::kLatent};
  e.model.name = "model";
  e.model.weights_digest[0] = 0xab;
  e.model.weights_digest[31] = 0xcd;
  e.device = {.capacity_bytes = 1 << 20, .copy_threads = 2, .copy_queue_max = 3};
  e.host = InternalHost("host", 2 << 20);
  e.device_backend = DeviceBackend::kCpu;
  e.cuda_device = 4;
  e.cxl = InternalHost("cxl", 3 << 20);
  e.tiers.Emplace(kSsdTierName, InternalSsd(std::move(ssd_keys)));
  e.write_policy = WritePolicy::kWriteThrough;
  e.writeback_dirty_fraction = 0.25;
  e.writeback_age_ms_max = 77;
  e.ssd_codec = {.codec = codecs::CodecId::kInt8, .zstd_level = 3, .group_size = 64};
  e.default_ttl_ms = 31;
  e.worker_threads = 5;
  e.thread_cpus = "all";
  e.background_nice = 12;
  e.background_priority = BackgroundPriority::kIdle;
  e.sink_chunks = 6;
  e.promote_on_load = false;
  e.remote = InternalRemote(std::move(remote_keys));
  e.prediction = {.enabled = true, .window = 3, .successors_max = 4, .sessions_max = 5,
                  .session_chunks_max = 6, .predict_k = 7, .blocks_max = 8};
  e.staging_buffers = 33;
  e.logger = logger;
  return e;
}

Result<RemoteKeyring> KeysFromText(const std::string& text) { return RemoteKeyring::Parse(text); }

TEST(PublicApiTest, EveryOptionReachesEngineOptions) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  Result<std::string> ssd_text = RemoteKeyring::GenerateText(1);
  Result<std::string> remote_text = RemoteKeyring::GenerateText(2);
  ASSERT_TRUE(ssd_text.ok() && remote_text.ok());
  const std::string key_file = dir->Join("ssd.keys");
  std::ofstream(key_file) << *ssd_text;
  ASSERT_EQ(chmod(key_file.c_str(), 0600), 0);

  CapturingLogger logger;
  Result<EngineOptions> out =
      public_api::ToEngineOptions(PublicAllSet(key_file, *remote_text), &logger);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  Result<RemoteKeyring> ssd_keys = KeysFromText(*ssd_text);
  Result<RemoteKeyring> remote_keys = KeysFromText(*remote_text);
  ASSERT_TRUE(ssd_keys.ok() && remote_keys.ok());
  ExpectOptionsEq(*out, InternalAllSet(*ssd_keys, *remote_keys, &logger));
}

TEST(PublicApiTest, BadEnumsAndKeysNameTheField) {
  api::EngineOptions o{.layout = kLayout, .host = {.capacity_bytes = 1 << 20}};
  o.ssd = api::SsdTierOptions{.dirs = {"/x"}, .sync = static_cast<api::SsdSync>(9)};
  Result<EngineOptions> out = public_api::ToEngineOptions(o, nullptr);
  ASSERT_TRUE(out.status().IsInvalidArgument());
  EXPECT_NE(out.status().message().find("ssd.sync"), std::string::npos);

  o.ssd->sync = api::SsdSync::kNone;
  o.ssd->keys = {.file = "/nonexistent", .text = "1 00"};
  out = public_api::ToEngineOptions(o, nullptr);
  ASSERT_TRUE(out.status().IsInvalidArgument());
  EXPECT_NE(out.status().message().find("ssd.keys"), std::string::npos);

  o.ssd.reset();
  o.remote = api::RemoteTierOptions{.endpoints = {"h:1"}, .keys = {.text = "not a key"}};
  out = public_api::ToEngineOptions(o, nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("remote.keys"), std::string::npos);

  o.remote.reset();
  o.layout.dtype = static_cast<api::DType>(0);
  out = public_api::ToEngineOptions(o, nullptr);
  ASSERT_TRUE(out.status().IsInvalidArgument());
  EXPECT_NE(out.status().message().find("layout.dtype"), std::string::npos);

  o.layout.dtype = api::DType::kF16;
  o.layout.kind = static_cast<api::LayoutKind>(7);
  out = public_api::ToEngineOptions(o, nullptr);
  ASSERT_TRUE(out.status().IsInvalidArgument());
  EXPECT_NE(out.status().message().find("layout.kind"), std::string::npos);
}

// Bytes of block (chunk, layer) of the test sequence: distinct per block.
std::vector<std::byte> BlockBytes(uint64_t block_bytes, size_t chunk, uint32_t layer) {
  std::vector<std::byte> b(block_bytes);
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] = static_cast<std::byte>((chunk * 31 + layer * 7 + i) & 0xff);
  }
  return b;
}

class PublicApiEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ScopedTempDir> d = ScopedTempDir::Create();
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<ScopedTempDir>(std::move(d).value());
  }

  api::EngineOptions Options() {
    return {.layout = kLayout,
            .host = {.capacity_bytes = 64 * kLayout.BlockBytes(), .prefault = false},
            .device_backend = api::DeviceBackend::kCpu,
            .ssd = api::SsdTierOptions{.dirs = {dir_->path()},
                                       .capacity_bytes = 16 << 20,
                                       .segment_bytes = 1 << 20,
                                       .staging_buffers = 2},
            .log = [this](api::LogLevel, std::string_view) { log_lines_.fetch_add(1); }};
  }

  // Stores `chunks` chunks of `tokens` and checks Lookup and a layer-by-layer Load of them.
  void StoreThenLoad(api::Engine& engine, const api::Namespace& ns,
                     const std::vector<uint32_t>& tokens, size_t chunks);

  std::unique_ptr<ScopedTempDir> dir_;
  std::atomic<int> log_lines_{0};
};

void PublicApiEngineTest::StoreThenLoad(api::Engine& engine, const api::Namespace& ns,
                                        const std::vector<uint32_t>& tokens, size_t chunks) {
  const uint32_t layers = engine.layout().layers;
  std::vector<std::vector<std::byte>> src;
  std::vector<std::span<const std::byte>> src_spans;
  for (size_t c = 0; c < chunks; ++c) {
    for (uint32_t l = 0; l < layers; ++l) src.push_back(BlockBytes(engine.block_bytes(), c, l));
  }
  for (const auto& b : src) src_spans.emplace_back(b);
  Result<api::StoreHandle> store = engine.Store(ns, tokens, src_spans);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE(store->Wait().ok());
  EXPECT_EQ(store->chunks_stored(), chunks);

  Result<api::LookupResult> hit = engine.Lookup(ns, tokens, {.session_id = 5});
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->matched_tokens, chunks * kLayout.block_tokens);
  ASSERT_EQ(hit->chunk_tiers.size(), chunks);

  std::vector<std::vector<std::byte>> dst(src.size(), std::vector<std::byte>(engine.block_bytes()));
  std::vector<std::span<std::byte>> dst_spans;
  for (auto& b : dst) dst_spans.emplace_back(b);
  Result<api::LoadHandle> load = engine.Load(ns, tokens, dst_spans);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_EQ(load->chunks(), chunks);
  for (uint32_t l = 0; l < layers; ++l) {
    ASSERT_TRUE(load->WaitLayer(l).ok());
    EXPECT_TRUE(load->LayerReady(l));
  }
  ASSERT_TRUE(load->Wait().ok());
  EXPECT_EQ(dst, src);
}

TEST_F(PublicApiEngineTest, StoreLookupLoadPinAndRestart) {
  const std::vector<uint32_t> tokens(2 * kLayout.block_tokens + 3, 42);  // 2 chunks and a tail.
  api::Namespace ns;
  {
    Result<std::unique_ptr<api::Engine>> engine = api::Engine::Open(Options());
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    api::Engine& e = **engine;
    EXPECT_EQ(e.device_backend(), api::DeviceBackend::kCpu);
    EXPECT_EQ(e.block_bytes(), 2u * 16 * 1 * 16 * 2);
    Result<api::Namespace> made = e.MakeNamespace("tenant");
    ASSERT_TRUE(made.ok());
    ns = *made;
    StoreThenLoad(e, ns, tokens, 2);

    Result<api::PinHandle> pin = e.Pin(ns, tokens);
    ASSERT_TRUE(pin.ok());
    EXPECT_EQ(pin->chunks(), 2u);
    EXPECT_TRUE(e.Prefetch(ns, tokens).ok());
    EXPECT_TRUE(e.Hint(ns, tokens, 5).ok());
    EXPECT_TRUE(e.Flush().ok());
    const api::EngineStats stats = e.Stats();
    EXPECT_EQ(stats.stores, 1u);
    EXPECT_EQ(stats.store_blocks, 4u);
    EXPECT_EQ(stats.lookups, 1u);
    EXPECT_EQ(stats.load_blocks, 4u);
    ASSERT_FALSE(stats.tiers.empty());
    EXPECT_EQ(stats.tiers.front().kind, api::TierKind::kHost);
    EXPECT_EQ(stats.tiers.back().kind, api::TierKind::kSsd);
    EXPECT_EQ(api::TierKindName(stats.tiers.back().kind), "ssd");
  }
  EXPECT_GT(log_lines_.load(), 0);  // Open logs the backend in use.

  // A new engine on the same directory finds the flushed blocks on the SSD.
  Result<std::unique_ptr<api::Engine>> engine = api::Engine::Open(Options());
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  Result<api::Namespace> again = (*engine)->MakeNamespace("tenant");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, ns);
  Result<api::LookupResult> hit = (*engine)->Lookup(ns, tokens);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->matched_tokens, 2u * kLayout.block_tokens);
  EXPECT_EQ(hit->chunk_tiers, std::vector<api::TierKind>(2, api::TierKind::kSsd));
}

TEST_F(PublicApiEngineTest, HandlesMayOutliveTheEngine) {
  Result<std::unique_ptr<api::Engine>> engine = api::Engine::Open(Options());
  ASSERT_TRUE(engine.ok());
  Result<api::Namespace> ns = (*engine)->MakeNamespace("");
  ASSERT_TRUE(ns.ok());
  const std::vector<uint32_t> tokens(kLayout.block_tokens, 1);
  std::vector<std::byte> a(kLayout.BlockBytes(), std::byte{1}), b(kLayout.BlockBytes());
  const std::vector<std::span<const std::byte>> src = {a, a};
  Result<api::StoreHandle> store = (*engine)->Store(ns.value(), tokens, src);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(store->Wait().ok());
  std::vector<std::byte> dst0(kLayout.BlockBytes()), dst1(kLayout.BlockBytes());
  const std::vector<std::span<std::byte>> dst = {dst0, dst1};
  Result<api::LoadHandle> load = (*engine)->Load(ns.value(), tokens, dst);
  ASSERT_TRUE(load.ok());
  Result<api::PinHandle> pin = (*engine)->Pin(ns.value(), tokens);
  ASSERT_TRUE(pin.ok());
  engine->reset();  // The engine's internals stay until the handles go.
  ASSERT_TRUE(load->Wait().ok());
  EXPECT_EQ(dst0, a);
  EXPECT_EQ(pin->chunks(), 1u);
}

// The public CodecOptions with only a codec set (zstd_level and group_size 0, their defaults)
// open an engine with the codec's defaults; shuffle-zstd round-trips the bytes exactly.
TEST_F(PublicApiEngineTest, CodecZerosAreTheCodecsDefaults) {
  for (const api::Codec codec :
       {api::Codec::kShuffleZstd, api::Codec::kInt8, api::Codec::kInt4, api::Codec::kInt8Rot,
        api::Codec::kInt4Rot, api::Codec::kK8V4, api::Codec::kK8V4Rot, api::Codec::kEcq5,
        api::Codec::kEcq6, api::Codec::kEcq6V5}) {
    api::EngineOptions o = Options();
    o.ssd_codec = {.codec = codec};
    Result<std::unique_ptr<api::Engine>> engine = api::Engine::Open(o);
    ASSERT_TRUE(engine.ok()) << static_cast<int>(codec) << ": " << engine.status().ToString();
    if (codec != api::Codec::kShuffleZstd) continue;  // Lossy: bytes differ by design.
    Result<api::Namespace> ns = (*engine)->MakeNamespace("zstd");
    ASSERT_TRUE(ns.ok());
    const std::vector<uint32_t> tokens(kLayout.block_tokens, 7);
    StoreThenLoad(**engine, *ns, tokens, 1);
    ASSERT_TRUE((*engine)->Flush().ok());
    engine->reset();
    // Reopened, the block comes from its shuffle-zstd record on the SSD.
    engine = api::Engine::Open(o);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<std::vector<std::byte>> dst(kLayout.layers,
                                            std::vector<std::byte>((*engine)->block_bytes()));
    std::vector<std::span<std::byte>> spans(dst.begin(), dst.end());
    Result<api::LoadHandle> load = (*engine)->Load(*ns, tokens, spans);
    ASSERT_TRUE(load.ok()) << load.status().ToString();
    ASSERT_TRUE(load->Wait().ok());
    for (uint32_t l = 0; l < kLayout.layers; ++l) {
      EXPECT_EQ(dst[l], BlockBytes((*engine)->block_bytes(), 0, l)) << l;
    }
  }
}

// A latent layout (MLA): one plane per block, half a K|V block of the same geometry; blocks go
// through Store, Load, the SSD and a restart byte for byte, and the kind enters every key (an
// engine with the K|V layout on the same directory finds nothing). A latent layout with more
// than one KV head is refused, naming kv_heads.
TEST_F(PublicApiEngineTest, LatentLayoutCachesOnePlanePerBlock) {
  const std::vector<uint32_t> tokens(2 * kLayout.block_tokens, 7);
  api::EngineOptions o = Options();
  o.layout.kind = api::LayoutKind::kLatent;
  EXPECT_EQ(o.layout.BlockBytes(), kLayout.BlockBytes() / 2);
  {
    Result<std::unique_ptr<api::Engine>> engine = api::Engine::Open(o);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    api::Engine& e = **engine;
    EXPECT_EQ(e.layout().kind, api::LayoutKind::kLatent);
    EXPECT_EQ(e.block_bytes(), 16u * 1 * 16 * 2);
    Result<api::Namespace> ns = e.MakeNamespace("tenant");
    ASSERT_TRUE(ns.ok());
    StoreThenLoad(e, *ns, tokens, 2);
    ASSERT_TRUE(e.Flush().ok());
  }
  {
    Result<std::unique_ptr<api::Engine>> engine = api::Engine::Open(o);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    Result<api::Namespace> ns = (*engine)->MakeNamespace("tenant");
    ASSERT_TRUE(ns.ok());
    Result<api::LookupResult> hit = (*engine)->Lookup(*ns, tokens);
    ASSERT_TRUE(hit.ok());
    EXPECT_EQ(hit->matched_tokens, tokens.size());
    const uint64_t block = (*engine)->block_bytes();
    std::vector<std::vector<std::byte>> dst(2 * kLayout.layers, std::vector<std::byte>(block));
    std::vector<std::span<std::byte>> dst_spans(dst.begin(), dst.end());
    Result<api::LoadHandle> load = (*engine)->Load(*ns, tokens, dst_spans);
    ASSERT_TRUE(load.ok()) << load.status().ToString();
    ASSERT_TRUE(load->Wait().ok());
    for (size_t c = 0; c < 2; ++c) {  // From the SSD, the bytes stored before the restart.
      for (uint32_t l = 0; l < kLayout.layers; ++l) {
        EXPECT_EQ(dst[c * kLayout.layers + l], BlockBytes(block, c, l));
      }
    }
  }
  {
    Result<std::unique_ptr<api::Engine>> engine = api::Engine::Open(Options());
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    Result<api::Namespace> ns = (*engine)->MakeNamespace("tenant");
    ASSERT_TRUE(ns.ok());
    Result<api::LookupResult> hit = (*engine)->Lookup(*ns, tokens);
    ASSERT_TRUE(hit.ok());
    EXPECT_EQ(hit->matched_tokens, 0u);
  }
  o.layout.kv_heads = 2;
  Result<std::unique_ptr<api::Engine>> refused = api::Engine::Open(o);
  ASSERT_TRUE(refused.status().IsInvalidArgument());
  EXPECT_NE(refused.status().message().find("kv_heads"), std::string::npos);
}

TEST_F(PublicApiEngineTest, OpenRefusesBadOptionsNamingTheField) {
  api::EngineOptions o = Options();
  o.layout.block_tokens = 17;
  Result<std::unique_ptr<api::Engine>> engine = api::Engine::Open(o);
  ASSERT_TRUE(engine.status().IsInvalidArgument());
  EXPECT_NE(engine.status().message().find("block_tokens"), std::string::npos);

  o = Options();
  o.host.capacity_bytes = 0;
  engine = api::Engine::Open(o);
  ASSERT_TRUE(engine.status().IsInvalidArgument());
  EXPECT_NE(engine.status().message().find("host"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
