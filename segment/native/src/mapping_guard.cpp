#include "gpuobs/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <mutex>

namespace gpuobs {
namespace {

// A daemon maps one segment per observed process; far more than any host runs at once.
constexpr int kGuardSlots = 4096;

struct GuardSlot {
  std::atomic<bool> claimed{false};
  std::atomic<uintptr_t> base{0};  // 0: not (yet, or any longer) a guarded mapping
  std::atomic<size_t> bytes{0};
  std::atomic<bool> faulted{false};
};

GuardSlot g_slots[kGuardSlots];
std::atomic<uint64_t> g_faults{0};
struct sigaction g_previous{};
std::once_flag g_installed;

void forward(int signal_number, siginfo_t* info, void* context) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) g_previous.sa_sigaction(signal_number, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler) {
    g_previous.sa_handler(signal_number);
    return;
  }
  // Default action: uninstall ourselves; the faulting instruction runs again and the fault
  // ends the process exactly as it would have without the guard.
  struct sigaction fallback{};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(signal_number, &fallback, nullptr);
}

void on_bus_error(int signal_number, siginfo_t* info, void* context) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  for (GuardSlot& slot : g_slots) {
    const uintptr_t base = slot.base.load(std::memory_order_acquire);
    const size_t bytes = slot.bytes.load(std::memory_order_acquire);
    if (base == 0 || address < base || address - base >= bytes) continue;
    // mmap is a plain system call here: nothing of the C library's state is touched. The whole
    // mapping is replaced so that every later read sees one consistent (empty) segment.
    void* replaced = ::mmap(reinterpret_cast<void*>(base), bytes, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (replaced == MAP_FAILED) break;  // cannot recover: let the fault be what it is
    slot.faulted.store(true, std::memory_order_release);
    g_faults.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  forward(signal_number, info, context);
}

void install() {
  struct sigaction action{};
  action.sa_sigaction = on_bus_error;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, &g_previous);
}

}  // namespace

MappingGuard::MappingGuard(void* base, size_t bytes) noexcept {
  if (!base || bytes == 0) return;
  std::call_once(g_installed, install);
  for (int i = 0; i < kGuardSlots; ++i) {
    bool expected = false;
    if (!g_slots[i].claimed.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) continue;
    // the handler looks only at a non-zero base: publish it last
    g_slots[i].faulted.store(false, std::memory_order_relaxed);
    g_slots[i].bytes.store(bytes, std::memory_order_relaxed);
    g_slots[i].base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    slot_ = i;
    return;
  }
}

MappingGuard::~MappingGuard() {
  if (slot_ < 0) return;
  g_slots[slot_].base.store(0, std::memory_order_release);
  g_slots[slot_].claimed.store(false, std::memory_order_release);
}

bool MappingGuard::faulted() const noexcept {
  return slot_ >= 0 && g_slots[slot_].faulted.load(std::memory_order_acquire);
}

uint64_t MappingGuard::faults_absorbed() noexcept { return g_faults.load(std::memory_order_relaxed); }

}  // namespace gpuobs
