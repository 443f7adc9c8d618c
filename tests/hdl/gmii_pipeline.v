// Two GMII lanes of register stages between two ports: what port A transmits, port B receives
// STAGES cycles later, and the other way. The smallest design a RoCEv2 peer can run through:
// every frame crosses real RTL, cycle by cycle, in the simulator.
`timescale 1ns / 1ps
module gmii_pipeline #(parameter STAGES = 4) (
    input  wire       clk,
    input  wire       rst,
    input  wire [7:0] a_txd, input wire a_tx_en, input wire a_tx_er,   // from A
    output wire [7:0] b_rxd, output wire b_rx_dv, output wire b_rx_er,  // to B
    input  wire [7:0] b_txd, input wire b_tx_en, input wire b_tx_er,   // from B
    output wire [7:0] a_rxd, output wire a_rx_dv, output wire a_rx_er   // to A
);
    reg [9:0] ab [0:STAGES-1];
    reg [9:0] ba [0:STAGES-1];
    integer i;
    always @(posedge clk) begin
        if (rst) begin
            for (i = 0; i < STAGES; i = i + 1) begin
                ab[i] <= 10'd0;
                ba[i] <= 10'd0;
            end
        end else begin
            ab[0] <= {a_tx_er, a_tx_en, a_txd};
            ba[0] <= {b_tx_er, b_tx_en, b_txd};
            for (i = 1; i < STAGES; i = i + 1) begin
                ab[i] <= ab[i-1];
                ba[i] <= ba[i-1];
            end
        end
    end
    assign {b_rx_er, b_rx_dv, b_rxd} = ab[STAGES-1];
    assign {a_rx_er, a_rx_dv, a_rxd} = ba[STAGES-1];
endmodule
