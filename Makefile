# kiln — one plain Makefile.
#   make            build/libkiln.a, build/libkiln.so, build/kiln
#   make test       every test; ends with "N passed, N failed" (the Python tests
#                   run in build/pyenv, which tools/pyenv.sh makes from PyPI once)
#   make test-asan  the same suite under AddressSanitizer + UBSan (build-asan/)
#   make run        kiln's main job on its default model
#   CC=clang make   builds with clang (both compilers must stay warning-free)

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
CFLAGS_BASE = -std=c11 -D_POSIX_C_SOURCE=200809L -g $(OPT) -fPIC $(SAN) \
              -Wall -Wextra -Wshadow -Wconversion -Werror=implicit-function-declaration \
              -Iinclude -Isrc/base -Isrc/ir -Isrc/model -Isrc/ref -Isrc/nn \
              -Isrc/rewrite -Isrc/sched -Isrc/codegen -Isrc/runtime
CFLAGS  += $(CFLAGS_BASE)
LDLIBS  = -lm -ldl -lpthread

# modules still being written are built only with WIP=1 (make WIP=1 ...), so
# that the tree stays green while they land
WIP_DIRS  =
WIP_TESTS =
ifeq ($(WIP),1)
LIB_SRC  = $(sort $(wildcard src/*/*.c))
TEST_SRC = $(sort $(wildcard tests/unit/test_*.c))
else
LIB_SRC  = $(sort $(filter-out $(addsuffix /%,$(WIP_DIRS)),$(wildcard src/*/*.c)))
TEST_SRC = $(sort $(filter-out $(WIP_TESTS),$(wildcard tests/unit/test_*.c)))
endif
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN = $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all test test-asan run clean fuzz-graphs fuzz fuzz-chat FORCE
all: $(BUILD)/libkiln.a $(BUILD)/libkiln.so $(BUILD)/kiln

$(BUILD)/obj/%.o: %.c $(wildcard include/*.h src/*/*.h src/ir/*.def)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libkiln.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libkiln.so: $(LIB_OBJ)
	$(CC) $(SAN) -shared -o $@ $^ $(LDLIBS)

# the commit the CLI reports (kiln bench --json): rewritten only when it changes
KILN_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
$(BUILD)/commit.txt: FORCE
	@mkdir -p $(dir $@)
	@echo '$(KILN_COMMIT)' | cmp -s - $@ || echo '$(KILN_COMMIT)' > $@

# `kiln serve` needs libmicrohttpd (HTTP) and cJSON (JSON) from the system's
# packages; without them the rest builds and `kiln serve` says what to install
SERVE_OK := $(shell pkg-config --exists libmicrohttpd libcjson 2>/dev/null && echo 1)
ifeq ($(SERVE_OK),1)
SERVE_CFLAGS = -DKILN_HAVE_SERVE $(shell pkg-config --cflags libmicrohttpd libcjson)
SERVE_LIBS   = $(shell pkg-config --libs libmicrohttpd libcjson)
else
$(info kiln: building without `kiln serve`: it needs libmicrohttpd and cJSON (Debian: apt-get install libmicrohttpd-dev libcjson-dev))
endif

# the CLI: every tools/*.c is one part of it (a new subcommand is a new file)
CLI_SRC = $(sort $(wildcard tools/*.c))
$(BUILD)/kiln: $(CLI_SRC) $(wildcard tools/*.h) $(BUILD)/libkiln.a $(BUILD)/commit.txt
	$(CC) $(CFLAGS) $(SERVE_CFLAGS) -DKILN_COMMIT='"$(KILN_COMMIT)"' -o $@ $(CLI_SRC) $(BUILD)/libkiln.a $(SERVE_LIBS) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libkiln.a tests/unit/check.h tests/unit/weights.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(BUILD)/libkiln.a $(LDLIBS)

test: all $(TEST_BIN)
	@BUILD=$(BUILD) TESTS="$(TEST_BIN)" sh tests/run.sh

test-asan:
	$(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" test KILN_ASAN=1

run: all
	@sh tools/run_default.sh

# compiled vs interpreted on N random graphs (default 500), vector paths on every batch
fuzz-graphs: $(BUILD)/tests/test_compile_fuzz
	KILN_FUZZ_GRAPHS=$(or $(N),500) KILN_FUZZ_VECTOR_EVERY=1 $(BUILD)/tests/test_compile_fuzz

# libFuzzer on the GGUF reader (clang), seeded with tiny models kiln's writer makes
FUZZ_SECONDS ?= 60
FUZZ_SRC = $(filter-out src/runtime/% src/codegen/% src/sched/%,$(LIB_SRC))
fuzz: $(BUILD)/libkiln.so
	@mkdir -p $(BUILD)/fuzz-corpus
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
	    -Iinclude -Isrc/base -Isrc/ir -Isrc/model -Isrc/ref -Isrc/nn -Isrc/rewrite \
	    tests/fuzz/fuzz_gguf.c $(LIB_SRC) -lm -ldl -lpthread -o $(BUILD)/fuzz_gguf
	py=$$(sh tools/pyenv.sh) && KILN_LIB=$(BUILD)/libkiln.so $$py tests/fuzz/make_corpus.py $(BUILD)/fuzz-corpus
	$(BUILD)/fuzz_gguf -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 $(BUILD)/fuzz-corpus

# libFuzzer on the chat-template renderer, seeded with the published templates
fuzz-chat:
	@mkdir -p $(BUILD)/fuzz-chat-corpus
	cp tests/data/chat/*.jinja $(BUILD)/fuzz-chat-corpus/
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
	    -Iinclude -Isrc/base -Isrc/model tests/fuzz/fuzz_chat.c src/model/jinja_parse.c src/model/jinja_eval.c \
	    src/base/base.c -lm -o $(BUILD)/fuzz_chat
	$(BUILD)/fuzz_chat -max_total_time=$(FUZZ_SECONDS) -max_len=16384 -timeout=10 $(BUILD)/fuzz-chat-corpus

clean:
	rm -rf build/obj build/tests build/lib* build/kiln build-asan build-clang
