package main

// runtimeServer is a deliberate copy of the operator's stack/engine.go runtimeServer and
// serveProgram (unexported there, and this experiment must not import unexported code): a
// LanguageRuntime gRPC server that serves one inline pulumi.RunFunc to the engine (what the CLI
// reaches through --client; in-process the address goes into Project.Runtime "client").

import (
	"context"
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

type runtimeServer struct {
	pulumirpc.UnimplementedLanguageRuntimeServer
	program pulumi.RunFunc
	address string
	cancel  chan bool
	done    <-chan error
}

func serveProgram(program pulumi.RunFunc) (*runtimeServer, error) {
	s := &runtimeServer{program: program, cancel: make(chan bool)}
	h, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: s.cancel,
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, s)
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	s.address, s.done = fmt.Sprintf("127.0.0.1:%d", h.Port), h.Done
	return s, nil
}

func (s *runtimeServer) close() {
	close(s.cancel)
	<-s.done
}

func (s *runtimeServer) GetRequiredPlugins(context.Context, *pulumirpc.GetRequiredPluginsRequest) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return &pulumirpc.GetRequiredPluginsResponse{}, nil
}

func (s *runtimeServer) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: "1.0.0"}, nil
}

func (s *runtimeServer) InstallDependencies(*pulumirpc.InstallDependenciesRequest, pulumirpc.LanguageRuntime_InstallDependenciesServer) error {
	return nil
}

func (s *runtimeServer) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	var engineAddr string
	if len(req.GetArgs()) > 0 {
		engineAddr = req.GetArgs()[0]
	}
	pctx, err := pulumi.NewContext(ctx, pulumi.RunInfo{
		EngineAddr:       engineAddr,
		MonitorAddr:      req.GetMonitorAddress(),
		Config:           req.GetConfig(),
		ConfigSecretKeys: req.GetConfigSecretKeys(),
		Project:          req.GetProject(),
		Stack:            req.GetStack(),
		Parallel:         req.GetParallel(),
		DryRun:           req.GetDryRun(),
		Organization:     req.GetOrganization(),
	})
	if err != nil {
		return nil, err
	}
	defer pctx.Close()
	err = func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("program panicked: %v", r)
			}
		}()
		return pulumi.RunWithContext(pctx, s.program)
	}()
	if err != nil {
		return &pulumirpc.RunResponse{Error: err.Error()}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}
