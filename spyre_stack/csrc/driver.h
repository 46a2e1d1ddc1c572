// Driver layer of the simulated Spyre card: device-memory accounting and the event clock.
// Plain C++ with no torch.library code. Device memory is host memory (the simulator runs on the
// host); what is modelled is the capacity, the per-device byte counters and the peak.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace spyre::driver {

struct MemoryCounters {
  int64_t capacity = 0;
  int64_t allocated = 0;
  int64_t peak = 0;
  int64_t num_allocs = 0;
  int64_t num_frees = 0;
  int64_t num_ooms = 0;
};

class DeviceMemory {
 public:
  void init(int count, int64_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    counters_.assign(static_cast<size_t>(count), MemoryCounters{});
    for (auto& c : counters_) {
      c.capacity = capacity;
    }
  }
  int count() const { return static_cast<int>(counters_.size()); }

  // Returns an empty string on success, else a CUDA-shaped out-of-memory message.
  std::string reserve(int device, int64_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& c = counters_.at(static_cast<size_t>(device));
    if (c.allocated + nbytes > c.capacity) {
      c.num_ooms += 1;
      return "Spyre out of memory. Tried to allocate " + human(nbytes) + ". Spyre device " +
          std::to_string(device) + " has a total capacity of " + human(c.capacity) +
          " of which " + human(c.capacity - c.allocated) + " is free. Of the allocated memory " +
          human(c.allocated) + " is allocated by PyTorch. (simulated card; capacity is set by "
          "SPYRE_MEMORY_BYTES or torch.spyre.set_memory_capacity)";
    }
    c.allocated += nbytes;
    c.num_allocs += 1;
    if (c.allocated > c.peak) {
      c.peak = c.allocated;
    }
    return {};
  }

  void release(int device, int64_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& c = counters_.at(static_cast<size_t>(device));
    c.allocated -= nbytes;
    c.num_frees += 1;
  }

  MemoryCounters get(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    return counters_.at(static_cast<size_t>(device));
  }

  void reset_peak(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& c = counters_.at(static_cast<size_t>(device));
    c.peak = c.allocated;
  }

  void set_capacity(int device, int64_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    counters_.at(static_cast<size_t>(device)).capacity = capacity;
  }

  static std::string human(int64_t nbytes) {
    const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(nbytes);
    int u = 0;
    while (v >= 1024.0 && u < 4) {
      v /= 1024.0;
      ++u;
    }
    char buf[64];
    if (u == 0) {
      snprintf(buf, sizeof(buf), "%lld bytes", static_cast<long long>(nbytes));
    } else {
      snprintf(buf, sizeof(buf), "%.2f %s", v, units[u]);
    }
    return buf;
  }

 private:
  std::mutex mutex_;
  std::vector<MemoryCounters> counters_;
};

inline DeviceMemory& memory() {
  static DeviceMemory instance;
  return instance;
}

// An event records the host clock when it is recorded (the simulator executes eagerly, so
// every recorded event is complete).
struct Event {
  int device = 0;
  bool recorded = false;
  int64_t ns = 0;
};

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace spyre::driver
