// plotly as interplab uses it: its core (axes, layout, scatter) and the one trace type the views draw, heatmap (also
// what res.figure() makes, which a saved page draws with this plotly). A third smaller than the cartesian bundle,
// which every saved notebook stores once.
import Plotly from "plotly.js/lib/core";
import heatmap from "plotly.js/lib/heatmap";

Plotly.register([heatmap]);

export default Plotly;
