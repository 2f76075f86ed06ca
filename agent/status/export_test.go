package status

// SameHardware exposes sameHardware to the external tests.
var SameHardware = sameHardware
