package projector

import (
	"errors"

	"graphsync/graphmodel"
)

// Config tunes a Projector. The zero value is ready to use.
type Config struct {
	// Database is the Neo4j database written to. Default: "" (the server's
	// default database; Community edition has only one).
	Database string
	// Model is the graph model. Default: graphmodel.Default.
	Model *graphmodel.Model
	// MetricsNamespace prefixes the metric names. Default: "graphsync".
	MetricsNamespace string
}

func (c Config) withDefaults() Config {
	if c.Model == nil {
		c.Model = &graphmodel.Default
	}
	if c.MetricsNamespace == "" {
		c.MetricsNamespace = "graphsync"
	}
	return c
}

func (c Config) validate() error {
	if c.Model == nil {
		return errors.New("projector config: no graph model")
	}
	return nil
}
