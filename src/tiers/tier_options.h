// TierOptionsSet: the options of the tiers below memory, each under the name its provider
// registered ("ssd", "redis", "fs"; tiers/tier_registry.h) and held in a std::any of the tier's
// own options type (tiers/<name>/<name>_options.h). The engine's options hold them so
// (EngineOptions::tiers, RemoteTierOptions::stores) and hand each to its provider unopened, so
// the engine never includes a tier's headers; a program that sets a tier up includes that tier's
// options header and writes its fields through Emplace / Find.
//
//   options.tiers.Emplace<SsdTierOptions>(kSsdTierName).dirs = {dir};
//   if (SsdTierOptions* ssd = options.tiers.Find<SsdTierOptions>(kSsdTierName)) ...
//
// Thread safety: a value type; no internal locking.
#pragma once

#include <algorithm>
#include <any>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvtier {

class TierOptionsSet {
 public:
  struct Entry {
    std::string name;  // The provider's registered name.
    std::any options;  // Of the provider's options type.
  };

  // A set of one entry: `value` under `name`.
  template <typename T>
  static TierOptionsSet Of(std::string_view name, T value) {
    TierOptionsSet set;
    set.Emplace(name, std::move(value));
    return set;
  }

  // Sets the options held under `name` to `value` (replacing any held there, of any type) and
  // returns them.
  template <typename T>
  T& Emplace(std::string_view name, T value = T{}) {
    std::any& slot = Slot(name);
    slot = std::move(value);
    return *std::any_cast<T>(&slot);
  }
  // Holds `options` under `name`, replacing any held there.
  void Put(std::string_view name, std::any options) { Slot(name) = std::move(options); }

  // The options under `name` as `T`; nullptr when none are held there or they are of another
  // type.
  template <typename T>
  T* Find(std::string_view name) {
    std::any* a = FindAny(name);
    return a == nullptr ? nullptr : std::any_cast<T>(a);
  }
  template <typename T>
  const T* Find(std::string_view name) const {
    const std::any* a = FindAny(name);
    return a == nullptr ? nullptr : std::any_cast<T>(a);
  }
  // The options under `name`, which must be held there as `T` (options the caller set up):
  // throws std::bad_any_cast when they are of another type, aborts when none are held.
  template <typename T>
  T& Get(std::string_view name) {
    std::any* a = FindAny(name);
    if (a == nullptr) std::abort();
    return std::any_cast<T&>(*a);
  }
  template <typename T>
  const T& Get(std::string_view name) const {
    const std::any* a = FindAny(name);
    if (a == nullptr) std::abort();
    return std::any_cast<const T&>(*a);
  }

  std::any* FindAny(std::string_view name) {
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.name == name; });
    return it == entries_.end() ? nullptr : &it->options;
  }
  const std::any* FindAny(std::string_view name) const {
    return const_cast<TierOptionsSet*>(this)->FindAny(name);
  }
  bool Has(std::string_view name) const { return FindAny(name) != nullptr; }
  // Whether anything was held under `name`.
  bool Erase(std::string_view name) {
    const size_t before = entries_.size();
    std::erase_if(entries_, [&](const Entry& e) { return e.name == name; });
    return entries_.size() != before;
  }
  void Clear() { entries_.clear(); }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  // In the order they were first set.
  const std::vector<Entry>& entries() const { return entries_; }
  // The same, to change the options in place (a name must stay unique).
  std::vector<Entry>& entries() { return entries_; }

 private:
  std::any& Slot(std::string_view name) {
    if (std::any* a = FindAny(name)) return *a;
    return entries_.emplace_back(Entry{std::string(name), std::any()}).options;
  }

  std::vector<Entry> entries_;
};

}  // namespace kvtier
