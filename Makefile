# kiln — one plain Makefile.
#   make            build/libkiln.a, build/libkiln.so, build/kiln
#   make test       every test; ends with "N passed, N failed" (the Python tests
#                   run in build/pyenv, which tools/pyenv.sh makes from PyPI once)
#   make test-asan  the same suite under AddressSanitizer + UBSan (build-asan/)
#   make run        kiln's main job on its default model
#   make install    PREFIX=/usr/local DESTDIR=: headers, libkiln.a, libkiln.so
#                   (SONAME libkiln.so.MAJOR), the CLI, lib/pkgconfig/kiln.pc
#   CC=clang make   builds with clang (both compilers must stay warning-free)

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
CFLAGS_BASE = -std=c11 -D_POSIX_C_SOURCE=200809L -g $(OPT) -fPIC -fvisibility=hidden $(SAN) \
              -Wall -Wextra -Wshadow -Wconversion -Werror=implicit-function-declaration \
              -Iinclude -Isrc/base -Isrc/ir -Isrc/model -Isrc/ref -Isrc/nn \
              -Isrc/rewrite -Isrc/sched -Isrc/codegen -Isrc/runtime -Isrc/onnx
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

.PHONY: all test test-asan run clean fuzz-graphs fuzz fuzz-chat fuzz-onnx onnx-conformance onnx-light install uninstall FORCE
all: $(BUILD)/libkiln.a $(BUILD)/libkiln.so $(BUILD)/kiln

$(BUILD)/obj/%.o: %.c $(wildcard include/*.h src/*/*.h src/ir/*.def)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libkiln.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# the shared library exports only what the public headers mark KILN_API
# (-fvisibility=hidden above); its SONAME is libkiln.so.MAJOR, the file
# libkiln.so.MAJOR.MINOR.PATCH, with the two usual links beside it
KILN_VERSION := $(shell sed -n 's/^\#define KILN_VERSION_STRING "\(.*\)"/\1/p' include/kiln.h)
KILN_SOMAJOR := $(firstword $(subst ., ,$(KILN_VERSION)))
$(BUILD)/libkiln.so: $(LIB_OBJ)
	$(CC) $(SAN) -shared -Wl,-soname,libkiln.so.$(KILN_SOMAJOR) -o $@.$(KILN_VERSION) $^ $(LDLIBS)
	ln -sf libkiln.so.$(KILN_VERSION) $@.$(KILN_SOMAJOR)
	ln -sf libkiln.so.$(KILN_VERSION) $@

# the commit the CLI reports (kiln bench --json): rewritten only when it changes
KILN_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
$(BUILD)/commit.txt: FORCE
	@mkdir -p $(dir $@)
	@echo '$(KILN_COMMIT)' | cmp -s - $@ || echo '$(KILN_COMMIT)' > $@

# pkg-config's description of an installed kiln (rewritten only when it changes)
PREFIX  ?= /usr/local
DESTDIR ?=
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
BINDIR  ?= $(PREFIX)/bin
PUBLIC_HEADERS = $(sort $(wildcard include/*.h))
$(BUILD)/kiln.pc: FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCDIR)' '' 'Name: kiln' \
	    'Description: search-based ML compiler and LLM inference runtime' 'Version: $(KILN_VERSION)' \
	    'Libs: -L$${libdir} -lkiln' 'Libs.private: $(LDLIBS)' 'Cflags: -I$${includedir}' > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@

# make install PREFIX=... DESTDIR=...: the public headers, both libraries
# (the shared one with its SONAME links), the CLI and kiln.pc
install: all $(BUILD)/kiln.pc
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(INCDIR) $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 644 $(PUBLIC_HEADERS) $(DESTDIR)$(INCDIR)/
	install -m 644 $(BUILD)/libkiln.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(BUILD)/libkiln.so.$(KILN_VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libkiln.so.$(KILN_VERSION) $(DESTDIR)$(LIBDIR)/libkiln.so.$(KILN_SOMAJOR)
	ln -sf libkiln.so.$(KILN_VERSION) $(DESTDIR)$(LIBDIR)/libkiln.so
	install -m 755 $(BUILD)/kiln $(DESTDIR)$(BINDIR)/
	install -m 644 $(BUILD)/kiln.pc $(DESTDIR)$(LIBDIR)/pkgconfig/

uninstall:
	rm -f $(addprefix $(DESTDIR)$(INCDIR)/,$(notdir $(PUBLIC_HEADERS))) $(DESTDIR)$(BINDIR)/kiln \
	    $(DESTDIR)$(LIBDIR)/libkiln.a $(DESTDIR)$(LIBDIR)/libkiln.so $(DESTDIR)$(LIBDIR)/libkiln.so.$(KILN_SOMAJOR) \
	    $(DESTDIR)$(LIBDIR)/libkiln.so.$(KILN_VERSION) $(DESTDIR)$(LIBDIR)/pkgconfig/kiln.pc

# `kiln serve` needs libmicrohttpd (HTTP) and cJSON (JSON) from the system's
# packages; without them the rest builds and `kiln serve` says what to install
SERVE_OK := $(shell pkg-config --exists libmicrohttpd libcjson 2>/dev/null && echo 1)
ifeq ($(SERVE_OK),1)
SERVE_CFLAGS = -DKILN_HAVE_SERVE $(shell pkg-config --cflags libmicrohttpd libcjson)
SERVE_LIBS   = $(shell pkg-config --libs libmicrohttpd libcjson)
else
$(info kiln: building without `kiln serve`: it needs libmicrohttpd and cJSON (Debian: apt-get install libmicrohttpd-dev libcjson-dev))
endif

# whether this build has the server, rewritten only when it changes: the
# CLI is linked again once the libraries are installed (or removed)
$(BUILD)/serve.txt: FORCE
	@mkdir -p $(dir $@)
	@echo '$(SERVE_OK)' | cmp -s - $@ || echo '$(SERVE_OK)' > $@

# the CLI: every tools/*.c is one part of it (a new subcommand is a new file)
CLI_SRC = $(sort $(wildcard tools/*.c))
$(BUILD)/kiln: $(CLI_SRC) $(wildcard tools/*.h) $(BUILD)/libkiln.a $(BUILD)/commit.txt $(BUILD)/serve.txt
	$(CC) $(CFLAGS) $(SERVE_CFLAGS) -DKILN_COMMIT='"$(KILN_COMMIT)"' -o $@ $(CLI_SRC) $(BUILD)/libkiln.a $(SERVE_LIBS) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libkiln.a tests/unit/check.h tests/unit/weights.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(BUILD)/libkiln.a $(LDLIBS)

test: all $(TEST_BIN)
	@BUILD=$(BUILD) TESTS="$(TEST_BIN) $(sort $(wildcard tests/py/test_*.py))" sh tests/run.sh

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

# libFuzzer on the ONNX reader and importer (clang), seeded with small models;
# the importer and the interpreter need only the layers below the compiler
FUZZ_ONNX_SRC = $(filter src/base/% src/ir/% src/nn/% src/ref/% src/onnx/%,$(LIB_SRC))
fuzz-onnx: $(BUILD)/libkiln.so
	@mkdir -p $(BUILD)/fuzz-onnx-corpus
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
	    -Iinclude -Isrc/base -Isrc/ir -Isrc/model -Isrc/ref -Isrc/nn -Isrc/rewrite -Isrc/onnx \
	    tests/fuzz/fuzz_onnx.c $(FUZZ_ONNX_SRC) -lm -ldl -lpthread -o $(BUILD)/fuzz_onnx
	py=$$(sh tools/pyenv.sh) && $$py tests/fuzz/make_onnx_corpus.py $(BUILD)/fuzz-onnx-corpus
	$(BUILD)/fuzz_onnx -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 $(BUILD)/fuzz-onnx-corpus

# ONNX's node test cases (from the pinned onnx package) through kiln's reference
# interpreter and compiled code; prints "N passed, N failed, N unsupported"
ONNX_JOBS ?= 2
onnx-conformance: $(BUILD)/libkiln.so
	py=$$(sh tools/pyenv.sh) && KILN_LIB=$(CURDIR)/$(BUILD)/libkiln.so KILN_POISON_RESULTS=1 \
	    $$py tests/onnx/conformance.py --jobs $(ONNX_JOBS)

# the nine light models of the onnx package, compiled, vs their expected outputs
onnx-light: $(BUILD)/libkiln.so
	py=$$(sh tools/pyenv.sh) && KILN_LIB=$(CURDIR)/$(BUILD)/libkiln.so $$py tests/onnx/light_models.py

# libFuzzer on the chat-template renderer, seeded with the published templates
fuzz-chat:
	@mkdir -p $(BUILD)/fuzz-chat-corpus
	cp tests/data/chat/*.jinja $(BUILD)/fuzz-chat-corpus/
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
	    -Iinclude -Isrc/base -Isrc/model tests/fuzz/fuzz_chat.c src/model/jinja_parse.c src/model/jinja_eval.c \
	    src/base/base.c -lm -o $(BUILD)/fuzz_chat
	$(BUILD)/fuzz_chat -max_total_time=$(FUZZ_SECONDS) -max_len=16384 -timeout=10 $(BUILD)/fuzz-chat-corpus

# libFuzzer on kiln serve's request parser (tools/serve_api.c; needs the server's libraries)
fuzz-serve: $(BUILD)/libkiln.a
	@mkdir -p $(BUILD)/fuzz-serve-corpus
	printf '\001{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stop": ["x"], "logprobs": true}' \
	    > $(BUILD)/fuzz-serve-corpus/chat.json
	printf '\000{"prompt": "Hello", "temperature": 0.5, "seed": 3, "stream": true}' > $(BUILD)/fuzz-serve-corpus/completion.json
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined $(SERVE_CFLAGS) \
	    -Iinclude -Isrc/base -Isrc/ir -Isrc/model -Isrc/runtime -Itools tests/fuzz/fuzz_serve_api.c tools/serve_api.c \
	    tools/serve_engine.c tools/chat_cli.c $(BUILD)/libkiln.a $(SERVE_LIBS) $(LDLIBS) -o $(BUILD)/fuzz_serve_api
	$(BUILD)/fuzz_serve_api -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 $(BUILD)/fuzz-serve-corpus

clean:
	rm -rf build/obj build/tests build/lib* build/kiln build-asan build-clang
