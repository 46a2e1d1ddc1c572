// Runtime glue: allocator, device guard (devices, streams, events), generator and PrivateUse1
// hooks. Uses the driver layer (driver.h); registers nothing with torch.library.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <unordered_map>

#include "driver.h"

namespace spyre {

constexpr int kPoolSize = 32;  // low- and high-priority streams per device, like the card
constexpr c10::StreamId kLowBase = 1;
constexpr c10::StreamId kHighBase = kLowBase + kPoolSize;
constexpr c10::StreamId kNewBase = kHighBase + kPoolSize;
constexpr int kMaxDevices = 64;

inline int device_count() { return driver::memory().count(); }

inline thread_local c10::DeviceIndex tls_device = 0;

inline c10::DeviceIndex current_device() { return tls_device; }

inline void check_device(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "spyre: invalid device index ", int(index),
              " (", device_count(), " simulated cards)");
}

// ---------------------------------------------------------------- allocator
struct Block {
  void* ptr;
  int64_t nbytes;
  c10::DeviceIndex device;
};

class BlockRegistry {
 public:
  void add(Block* b) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (b->ptr) blocks_[b->ptr] = b->device;
  }
  void remove(Block* b) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (b->ptr) blocks_.erase(b->ptr);
  }
  c10::DeviceIndex find(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(p);
    return it == blocks_.end() ? c10::DeviceIndex(-1) : it->second;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<void*, c10::DeviceIndex> blocks_;
};

inline BlockRegistry& blocks() {
  static BlockRegistry r;
  return r;
}

inline void free_block(void* ctx) {
  auto* b = static_cast<Block*>(ctx);
  blocks().remove(b);
  driver::memory().release(b->device, b->nbytes);
  if (b->ptr) c10::free_cpu(b->ptr);
  delete b;
}

class DeviceAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    auto device = current_device();
    check_device(device);
    auto msg = driver::memory().reserve(device, static_cast<int64_t>(nbytes));
    TORCH_CHECK_WITH(OutOfMemoryError, msg.empty(), msg);
    void* p = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    auto* b = new Block{p, static_cast<int64_t>(nbytes), device};
    blocks().add(b);
    return {p, b, &free_block, c10::Device(c10::DeviceType::PrivateUse1, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

inline DeviceAllocator& device_allocator() {
  static DeviceAllocator a;
  return a;
}

// Pinned host memory: ordinary host memory remembered so is_pinned() can answer.
class PinnedRegistry {
 public:
  void add(void* p) {
    std::lock_guard<std::mutex> l(m_);
    s_.insert(p);
  }
  void remove(void* p) {
    std::lock_guard<std::mutex> l(m_);
    s_.erase(p);
  }
  bool has(const void* p) {
    std::lock_guard<std::mutex> l(m_);
    return s_.count(const_cast<void*>(p)) > 0;
  }

 private:
  std::mutex m_;
  std::set<void*> s_;
};

inline PinnedRegistry& pinned() {
  static PinnedRegistry r;
  return r;
}

inline void free_pinned(void* p) {
  pinned().remove(p);
  c10::free_cpu(p);
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (p) pinned().add(p);
    return {p, p, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

inline PinnedAllocator& pinned_allocator() {
  static PinnedAllocator a;
  return a;
}

// ---------------------------------------------------------------- streams and events
inline thread_local std::array<c10::StreamId, kMaxDevices> tls_stream{};
inline std::array<std::atomic<int>, kMaxDevices> pool_low{};
inline std::array<std::atomic<int>, kMaxDevices> pool_high{};
inline std::atomic<c10::StreamId> next_new_stream{kNewBase};

inline c10::Stream make_stream(c10::DeviceIndex d, c10::StreamId id) {
  if (d < 0) d = current_device();
  check_device(d);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, d), id);
}

// Priority of a stream id: 0 for the default, low-pool and new streams, -1 for high-pool.
inline int stream_priority(c10::StreamId id) {
  return (id >= kHighBase && id < kNewBase) ? -1 : 0;
}

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;
  c10::DeviceType type() const override { return static_type; }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(static_type, current_device());
  }
  void setDevice(c10::Device d) const override {
    check_device(d.index());
    tls_device = d.index();
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override { tls_device = d.index(); }
  static c10::DeviceIndex resolve(c10::Device d) {
    auto i = d.has_index() ? d.index() : current_device();
    check_device(i);
    return i;
  }
  c10::Stream getStream(c10::Device d) const override {
    auto i = resolve(d);
    return make_stream(i, tls_stream[i]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return make_stream(resolve(d), 0); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high) const override {
    auto i = resolve(d);
    auto& counter = high ? pool_high[i] : pool_low[i];
    int slot = counter.fetch_add(1) % kPoolSize;
    return make_stream(i, (high ? kHighBase : kLowBase) + slot);
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    if (priority < 0) return getStreamFromGlobalPool(d, true);
    return make_stream(resolve(d), next_new_stream.fetch_add(1));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto old = getStream(s.device());
    tls_stream[resolve(s.device())] = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<driver::Event*>(event);
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "spyre: event device index does not match the recording stream's device");
    if (*event == nullptr) *event = new driver::Event();
    auto* e = static_cast<driver::Event*>(*event);
    e->device = stream.device_index();
    e->recorded = true;
    e->ns = driver::now_ns();
  }
  void block(void*, const c10::Stream&) const override {}  // eager execution: already done
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  double elapsedTime(void* a, void* b, const c10::DeviceIndex) const override {
    TORCH_CHECK(a && b, "spyre: both events must be recorded before elapsed_time");
    auto* ea = static_cast<driver::Event*>(a);
    auto* eb = static_cast<driver::Event*>(b);
    TORCH_CHECK(ea->recorded && eb->recorded, "spyre: both events must be recorded");
    return static_cast<double>(eb->ns - ea->ns) / 1e6;  // milliseconds, like CUDA
  }
};

// ---------------------------------------------------------------- generator
class GeneratorImpl : public at::CPUGeneratorImpl {
 public:
  explicit GeneratorImpl(c10::DeviceIndex index) {
    device_ = c10::Device(c10::DeviceType::PrivateUse1, index);
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }
};

inline std::vector<at::Generator>& default_generators() {
  static std::vector<at::Generator> gens;
  return gens;
}

inline std::mutex& generators_mutex() {
  static std::mutex m;
  return m;
}

inline const at::Generator& default_generator(c10::DeviceIndex index) {
  std::lock_guard<std::mutex> lock(generators_mutex());
  auto& gens = default_generators();
  if (gens.empty()) {
    for (int i = 0; i < device_count(); ++i) {
      gens.push_back(at::make_generator<GeneratorImpl>(static_cast<c10::DeviceIndex>(i)));
      gens.back().set_current_seed(67280421310721ULL);  // same default seed as the CPU
    }
  }
  if (index < 0) index = current_device();
  check_device(index);
  return gens.at(static_cast<size_t>(index));
}

// ---------------------------------------------------------------- hooks
void resize_bytes(const c10::Storage& storage, size_t newsize);

struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override {
    check_device(d);
    tls_device = d;
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = current_device();
    setCurrentDevice(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    if (index < 0) index = current_device();
    return at::make_generator<GeneratorImpl>(index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    auto d = blocks().find(data);
    return c10::Device(c10::DeviceType::PrivateUse1, d < 0 ? current_device() : d);
  }
  bool isPinnedPtr(const void* data) const override { return pinned().has(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &pinned_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_bytes(storage, newsize);
  }
};

inline void resize_bytes(const c10::Storage& storage, size_t newsize) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  auto device = storage.device();
  auto saved = current_device();
  tls_device = device.index();
  c10::DataPtr fresh;
  try {
    fresh = device_allocator().allocate(newsize);
  } catch (...) {
    tls_device = saved;
    throw;
  }
  tls_device = saved;
  auto oldsize = storage.nbytes();
  if (oldsize > 0 && newsize > 0 && storage.data()) {
    std::memcpy(fresh.get(), storage.data(), std::min(oldsize, newsize));
  }
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(newsize);
}

}  // namespace spyre
