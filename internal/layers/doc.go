// Package layers holds no code: its test pins which of deputy's packages
// may import which, so that nothing climbs back up the import graph and a
// user compiles no database driver, MCP SDK or vendor SDK they did not
// import.
package layers
