// A kernel timeline for any CUDA program, graph replays included: a CUPTI
// injection library (CUDA_INJECTION64_PATH=libstrata_kernel_trace.so) that
// records every kernel's start and end on the GPU's clock and writes them as
// CSV at exit to $STRATA_KERNEL_TRACE (default kernel_trace.csv).
//
// Why: inside a captured decode step PDL and the side branches overlap the
// kernels, so Nsight Compute (which serialises them) cannot say what each one
// costs on the critical path; end-to-end gaps on this timeline can. It uses
// CUPTI's concurrent-kernel activity, which does not serialise kernels.
// tools/gpu/kernel_trace.py turns the CSV into a per-step breakdown.
//
// A development tool: not part of the library, never linked into it.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Row {
  uint64_t start, end;
  uint32_t stream, graph;
  uint64_t node;
  uint32_t correlation;
  int32_t grid, block;
  std::string name;
};

std::mutex g_mu;
std::vector<Row>* g_rows = nullptr;  // leaked on purpose: written from atexit
constexpr size_t kBufferBytes = 8 << 20;

std::string Demangle(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = (status == 0 && d != nullptr) ? d : mangled;
  std::free(d);
  for (const char* noise : {"(anonymous namespace)::", "strata::cuda::", "void "}) {
    for (size_t at; (at = s.find(noise)) != std::string::npos;) s.erase(at, std::strlen(noise));
  }
  // Keep the name and its template arguments; drop the parameter list.
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0) return s.substr(0, i);
  }
  return s;
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    g_rows->push_back(Row{k->start, k->end, k->streamId, k->graphId, k->graphNodeId,
                          k->correlationId, k->gridX * k->gridY * k->gridZ,
                          k->blockX * k->blockY * k->blockZ, Demangle(k->name)});
  }
  std::free(buffer);
}

void WriteAtExit() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("STRATA_KERNEL_TRACE");
  if (path == nullptr || *path == '\0') path = "kernel_trace.csv";
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path);
    return;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(f, "start_ns,end_ns,stream,graph,node,correlation,grid,block,name\n");
  for (const Row& r : *g_rows) {
    std::string name = r.name;
    for (char& c : name) {
      if (c == ',' || c == '"') c = ';';
    }
    std::fprintf(f, "%llu,%llu,%u,%u,%llu,%u,%d,%d,%s\n",
                 static_cast<unsigned long long>(r.start), static_cast<unsigned long long>(r.end),
                 r.stream, r.graph, static_cast<unsigned long long>(r.node), r.correlation, r.grid,
                 r.block, name.c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu kernels → %s\n", g_rows->size(), path);
}

}  // namespace

extern "C" int InitializeInjection(void) {
  g_rows = new std::vector<Row>();
  g_rows->reserve(1 << 20);
  if (cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI activity tracing is unavailable\n");
    return 0;
  }
  std::atexit(WriteAtExit);
  return 1;
}
