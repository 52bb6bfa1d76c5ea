'use strict';
// capgeo's partial plotly.js bundle: the trace types capgeo's pages draw (scatter, bar, heatmap) and
// scattergl for the caption map
var Plotly = require('plotly.js/lib/core');
Plotly.register([
    require('plotly.js/lib/scatter'),
    require('plotly.js/lib/bar'),
    require('plotly.js/lib/heatmap'),
    require('plotly.js/lib/scattergl'),
]);
module.exports = Plotly;
