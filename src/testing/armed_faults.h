// ArmedFaults: the list of armed faults that kvtier's fault injectors share (FaultInjectionEnv,
// FakeRemoteStore): ids, the rule that a fault fires on the Nth matching operation counted from
// when it was armed (and, with FaultRepeat::kEveryAfter, on every one after it), a bound on how
// many are armed at once, and how often each has fired. What a fault does is the injector's.
//
// Thread safety: none; the injector calls it under its own mutex. Ownership: holds copies of the
// specs. `Spec` is any struct with `uint64_t nth` and `FaultRepeat repeat` fields.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/result.h"

namespace kvtier {

enum class FaultRepeat : uint8_t {
  kOnce = 0,        // Only the Nth matching operation.
  kEveryAfter = 1,  // The Nth and every matching operation after it.
};

using FaultId = uint64_t;

template <typename Spec>
class ArmedFaults {
 public:
  // Faults armed at once, at most: a test arms a handful, and the list is walked per operation.
  static constexpr size_t kArmedMax = 64;

  // InvalidArgument for nth == 0 or when kArmedMax faults are armed already.
  Result<FaultId> Arm(const Spec& spec) {
    if (spec.nth == 0) return Status::InvalidArgument("fault nth counts from 1");
    if (faults_.size() >= kArmedMax) {
      return Status::InvalidArgument("at most " + std::to_string(kArmedMax) +
                                     " faults may be armed at once");
    }
    faults_.push_back({.id = next_id_++, .spec = spec});
    return faults_.back().id;
  }
  // Unknown ids are ignored.
  void Disarm(FaultId id) {
    std::erase_if(faults_, [id](const Armed& f) { return f.id == id; });
  }
  void DisarmAll() { faults_.clear(); }
  // Operations the fault has affected; 0 for an unknown (or disarmed) id.
  uint64_t Fired(FaultId id) const {
    for (const Armed& f : faults_) {
      if (f.id == id) return f.fired;
    }
    return 0;
  }

  // Counts one operation against every fault whose spec `matches` (a predicate) and calls
  // fire(spec, times_fired) for each whose turn it is, in the order they were armed.
  template <typename Match, typename Fire>
  void Count(const Match& matches, const Fire& fire) {
    for (Armed& f : faults_) {
      if (!matches(f.spec)) continue;
      ++f.matched;
      const bool turn = f.matched == f.spec.nth ||
                        (f.spec.repeat == FaultRepeat::kEveryAfter && f.matched > f.spec.nth);
      if (!turn) continue;
      ++f.fired;
      fire(f.spec, f.fired);
    }
  }

 private:
  struct Armed {
    FaultId id = 0;
    Spec spec;
    uint64_t matched = 0;  // Matching operations since arming.
    uint64_t fired = 0;
  };

  std::vector<Armed> faults_;  // In the order armed; at most kArmedMax.
  FaultId next_id_ = 1;
};

}  // namespace kvtier
