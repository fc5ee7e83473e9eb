// Command embed-stack serves Qwen3-Embedding models behind an OpenAI-compatible
// POST /v1/embeddings.
//
// One binary plays every role: `serve` is the HTTP API (it holds the tokenizer,
// never the weights) and starts `worker` children that load the GGUF through
// llama.cpp. Configuration is read here and only here; packages take it as exported
// struct fields.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/internal/buildinfo"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
)

const usage = `embed-stack: an OpenAI-compatible embedding server for the models people host
themselves (Qwen3-Embedding and Qwen3-Reranker first), on llama.cpp.

Usage: embed-stack COMMAND [flags]

Serve:
  serve               run the HTTP API on one or more models (it starts its own workers)

Offline:
  embed               embed a file of texts into Parquet, .npy or JSONL (resumable;
                      --shard i/N embeds one slice)
  merge               merge the parts of a sharded embed into one output, in input order

Models and set-up:
  pull REF...         download models into the Hugging Face cache, with progress
  ps                  list the models a running server holds loaded, with their idle time
  devices             print the device (CPU, CUDA, Metal) a worker would run on
  tiktoken-cache DIR  write tiktoken's cl100k_base file into DIR, for LangChain offline

Development:
  bench               benchmark against the engine floor and peers (docs/performance.md)
  worker              run one llama.cpp worker (serve starts them)
  version             print the version

Run 'embed-stack COMMAND --help' for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// A command is one subcommand, made from its command line by its constructor
// (newServe, newEmbed, ...). The signals are handled here, once, for all of them.
type command interface {
	// Run works until the command is done, or until ctx ends (SIGINT or SIGTERM)
	// and the command has stopped gracefully: serve drains its requests, embed
	// keeps what it has written for a rerun to resume. It reports how it ended (on
	// its log or stderr) and returns nil or the exitStatus it ended with.
	Run(ctx context.Context) error
	// Close makes a graceful stop in progress end now (a second SIGINT or
	// SIGTERM): serve closes its connections and kills its workers instead of
	// waiting for them. It is safe at any time, more than once.
	Close() error
}

// exitStatus is how a command ended, once it has reported why.
type exitStatus int

func (s exitStatus) Error() string { return "exit status " + strconv.Itoa(int(s)) }

// newCommand parses a command line into a command. A command line that runs
// nothing gives a nil command and the exit status: 0 for --help, 2 for one refused
// (reported on stderr).
type newCommand func(args []string, stdout, stderr io.Writer) (command, int)

// commands are the subcommands by name.
var commands = map[string]newCommand{
	"serve": newServe, "embed": newEmbed, "merge": newMerge, "worker": newWorker, "bench": newBench,
	"devices": newDevices, "pull": newPull, "tiktoken-cache": newTiktokenCache, "ps": newPS,
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version", "--version", "-version":
		if len(args) > 1 {
			// As every command refuses what it does not know (docs/configuration.md).
			fmt.Fprintf(stderr, "embed-stack version takes no arguments; got %q\n", strings.Join(args[1:], " "))
			return 2
		}
		fmt.Fprintln(stdout, buildinfo.Get())
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	parse, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "embed-stack: unknown command %q", args[0])
		names := make([]string, 0, len(commands))
		for name := range commands {
			names = append(names, name)
		}
		slices.Sort(names)
		if near := flagconfig.Suggest(args[0], names); len(near) > 0 {
			fmt.Fprintf(stderr, "; did you mean %s?", near[0])
		}
		fmt.Fprint(stderr, "\nRun 'embed-stack --help' for the commands.\n")
		return 2
	}
	c, status := parse(args[1:], stdout, stderr)
	if c == nil {
		return status
	}
	return runCommand(c)
}

// stopSignals are the signals that stop a command gracefully. SIGHUP is one: a
// closed terminal, or a supervisor that sends it by habit, used to kill serve at once
// (exit 129, the request in flight reset, nothing logged, the worker socket
// directory left behind; issue 28). Reloading the configuration on SIGHUP, as some
// daemons do, would need every flag to be changeable at run time; draining is what
// the other two signals do, and what a process manager's restart expects.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// stopSignal is the cause of Run's context when a signal ended it.
type stopSignal struct{ sig os.Signal }

func (s stopSignal) Error() string { return "received " + signalName(s.sig) }

// Is makes a stop by signal a cancellation (errors.Is(err, context.Canceled)), as
// the plain cancel it replaces was: the commands tell an interruption by it.
func (s stopSignal) Is(target error) bool { return target == context.Canceled }

// signalName is a stop signal's conventional name, for the log.
func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}

// stoppedBy returns the name of the signal that ended ctx, or "" when none did.
func stoppedBy(ctx context.Context) string {
	var s stopSignal
	if errors.As(context.Cause(ctx), &s) {
		return signalName(s.sig)
	}
	return ""
}

// runCommand runs c with the signals wired to it: the first SIGINT, SIGTERM or
// SIGHUP ends Run's context (its cause names the signal), and any later one calls
// Close. They are counted from the start, so that a second signal that arrives
// before the command reaches its shutdown still cuts the shutdown short. Whatever
// way Run ends, the worker socket directories this process made are removed last.
func runCommand(c command) int {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals...)
	defer signal.Stop(sigs)
	ctx, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	done := make(chan struct{})
	go func() {
		for first := true; ; first = false {
			select {
			case sig := <-sigs:
				if first {
					stop(stopSignal{sig})
				} else {
					_ = c.Close()
				}
			case <-done:
				return
			}
		}
	}()
	err := c.Run(ctx)
	close(done)
	// The workers are gone or going (they die with this process): a directory an
	// exit path did not remove (a second signal's, a failed start's) is garbage.
	backends.RemoveOwnSocketDirs("")
	var s exitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &s):
		return int(s)
	}
	return 1
}

// reportFailure reports the error that ends a command. With the text log, the
// default and the one a person reads, it is one plain line on stderr, as a flag's
// error is ("embed-stack serve: --model: ..."): slog's text form quoted it and
// escaped its quotes into one 700-character record. With the JSON log it stays a
// record ("embed-stack serve failed", with the error), the last one a log
// collector reads.
func reportFailure(logger *slog.Logger, stderr io.Writer, logFormat, command string, err error) {
	if strings.EqualFold(logFormat, "json") {
		logger.Error(command+" failed", "error", err)
		return
	}
	fmt.Fprintf(stderr, "%s: %v\n", command, err)
}
